//! Saved HNSW graphs: an agent's graph written beside the store with hnsw_rs's dump and loaded back
//! after a start, so a large index has its graph in a second or two instead of after a rebuild from
//! every stored memory. The store stays the truth: a saved graph is checked (format, sizes,
//! checksums) before hnsw_rs reads it, since hnsw_rs panics or exits on a damaged file, and
//! anything wrong with it means a rebuild, never an error.
//!
//! `SavedIndexes` keeps each agent's graph in a folder named by the agent's id in hex under the
//! store's `hnsw` folder: the graph, its data, the memory id of each position (`IDS_FILE`) and a
//! manifest (`MANIFEST_FILE`: format, dimension, `m`, sizes and CRC-32s). A save writes a temporary
//! folder, syncs it and swaps it in by rename. `saved_ids` reads the manifest and the ids;
//! `load_graph` checks sizes and checksums before handing the files to hnsw_rs.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hnsw_rs::api::AnnT;
use hnsw_rs::hnsw::Hnsw;
use hnsw_rs::hnswio::HnswIo;
use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::index::GraphOrigin;
use super::index::{HnswParams, UnitDot, VectorIndex};
use crate::locks::LockRecovered;

/// Bumped when the files' layout changes; an older layout is rebuilt, not read.
const FORMAT: u32 = 1;

/// Why an agent's graph could not be saved, or why a saved one cannot be used (the caller then
/// rebuilds it from the store).
#[derive(Debug, thiserror::Error)]
pub enum SavedGraphError {
    /// A file or folder could not be created, written, synced, read or moved.
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// hnsw_rs panicked while writing the graph into the folder.
    #[error("hnsw_rs panicked writing {0}")]
    PanickedWriting(String),
    /// hnsw_rs refused to write the graph into the folder.
    #[error("hnsw_rs could not write {path}: {reason}")]
    NotWritten { path: String, reason: String },
    /// hnsw_rs wrote its files under another name than the one asked for.
    #[error("hnsw_rs wrote {0} instead of {BASENAME}")]
    OtherName(String),
    /// The manifest could not be encoded.
    #[error("{0}")]
    Manifest(String),
    /// The graph was built with another `m` than the config now gives.
    #[error("built with m = {saved} and the config now says {now}")]
    OtherM { saved: usize, now: usize },
    /// The ids file does not hold one id per point.
    #[error("{path} holds {ids} ids for {points} points")]
    IdCount {
        path: String,
        ids: usize,
        points: usize,
    },
    /// The manifest went away between reading the ids and loading the graph.
    #[error("the saved files are gone")]
    Gone,
    /// The saved graph is not of the size or dimension asked for.
    #[error(
        "the saved graph holds {points} points of {dim} floats, not {want_points} of {want_dim}"
    )]
    OtherShape {
        points: usize,
        dim: usize,
        want_points: usize,
        want_dim: usize,
    },
    /// A file's size or checksum differs from the manifest's.
    #[error("{0} changed since it was saved")]
    Changed(String),
    /// hnsw_rs panicked while reading the graph.
    #[error("hnsw_rs panicked reading {0}")]
    PanickedReading(String),
    /// hnsw_rs refused to read the graph.
    #[error("hnsw_rs could not read {path}: {reason}")]
    NotRead { path: String, reason: String },
    /// The loaded graph holds another number of points than its manifest.
    #[error("the graph holds {has} points, the manifest {want}")]
    PointCount { has: usize, want: usize },
    /// The manifest is not JSON of the expected shape.
    #[error("{path} is not a manifest: {reason}")]
    NotAManifest { path: String, reason: String },
    /// The files were saved in a format this version does not read.
    #[error("saved in format {0}")]
    OtherFormat(u32),
}
const BASENAME: &str = "graph";
const IDS_FILE: &str = "ids.bin";
const MANIFEST_FILE: &str = "manifest.json";

/// What a saved graph must match before hnsw_rs is allowed to read it.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    dim: usize,
    points: usize,
    m: usize,
    files: Vec<SavedFile>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedFile {
    name: String,
    bytes: u64,
    crc32: u32,
}

/// The folder of saved graphs, one subfolder per agent.
pub struct SavedIndexes {
    root: PathBuf,
    /// One save at a time: two saves of one agent would share its temporary folder, and saving
    /// is disk-bound anyway.
    saving: Mutex<()>,
}

impl SavedIndexes {
    pub fn new(root: PathBuf) -> SavedIndexes {
        SavedIndexes {
            root,
            saving: Mutex::new(()),
        }
    }

    /// Agent ids become folder names byte for byte in hex, so no id can name another path.
    fn folder(&self, agent: &str, suffix: &str) -> PathBuf {
        let hex: String = agent.bytes().map(|b| format!("{b:02x}")).collect();
        self.root.join(format!("{hex}{suffix}"))
    }

    /// Removes the agent's saved graph, if it has one.
    pub fn remove(&self, agent: &str) -> std::io::Result<()> {
        let _one_at_a_time = self.saving.lock_recovered();
        match std::fs::remove_dir_all(self.folder(agent, "")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Writes the agent's graph (nothing for an exact-search index) and returns the points saved.
    /// The files are written to a temporary folder, synced, then swapped in by rename, so a crash
    /// leaves the previous save or none, never half of one.
    pub fn save(&self, agent: &str, index: &VectorIndex) -> Result<usize, SavedGraphError> {
        let Some(graph) = index.graph() else {
            return Ok(0);
        };
        if index.is_empty() {
            return Ok(0);
        }
        let _one_at_a_time = self.saving.lock_recovered();
        let temporary = self.folder(agent, ".saving");
        let _ = fs::remove_dir_all(&temporary);
        fs::create_dir_all(&temporary).map_err(|e| io_error("create", &temporary, e))?;
        // hnsw_rs panics when it cannot create its files; that is an error here.
        let dumped = catch_unwind(AssertUnwindSafe(|| graph.file_dump(&temporary, BASENAME)))
            .map_err(|_| SavedGraphError::PanickedWriting(temporary.display().to_string()))?
            .map_err(|e| SavedGraphError::NotWritten {
                path: temporary.display().to_string(),
                reason: e.to_string(),
            })?;
        if dumped != BASENAME {
            return Err(SavedGraphError::OtherName(dumped));
        }
        let ids_path = temporary.join(IDS_FILE);
        write_ids(&ids_path, index.ids()).map_err(|e| io_error("write", &ids_path, e))?;
        let mut files = Vec::new();
        for name in [
            format!("{BASENAME}.hnsw.graph"),
            format!("{BASENAME}.hnsw.data"),
            IDS_FILE.to_string(),
        ] {
            let path = temporary.join(&name);
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error("sync", &path, e))?;
            let (bytes, crc32) = checksum(&path).map_err(|e| io_error("read", &path, e))?;
            files.push(SavedFile { name, bytes, crc32 });
        }
        let manifest = Manifest {
            format: FORMAT,
            dim: index.dim(),
            points: index.len(),
            m: index.params().m,
            files,
        };
        let manifest_path = temporary.join(MANIFEST_FILE);
        let text =
            serde_json::to_vec(&manifest).map_err(|e| SavedGraphError::Manifest(e.to_string()))?;
        File::create(&manifest_path)
            .and_then(|mut f| {
                f.write_all(&text)?;
                f.sync_all()
            })
            .map_err(|e| io_error("write", &manifest_path, e))?;
        let current = self.folder(agent, "");
        let previous = self.folder(agent, ".old");
        let _ = fs::remove_dir_all(&previous);
        if current.exists() {
            fs::rename(&current, &previous).map_err(|e| io_error("move", &current, e))?;
        }
        fs::rename(&temporary, &current).map_err(|e| io_error("move", &temporary, e))?;
        let _ = fs::remove_dir_all(&previous);
        if let Ok(root) = File::open(&self.root) {
            let _ = root.sync_all();
        }
        index.set_saved_len(index.len());
        Ok(index.len())
    }

    /// The memory ids of the agent's saved graph by position, `None` when there is none; an
    /// error says why a saved graph can't be used (the caller rebuilds).
    pub fn saved_ids(
        &self,
        agent: &str,
        params: HnswParams,
    ) -> Result<Option<Vec<u64>>, SavedGraphError> {
        let _no_save_meanwhile = self.saving.lock_recovered();
        let folder = self.folder(agent, "");
        let Some(manifest) = read_manifest(&folder)? else {
            return Ok(None);
        };
        if manifest.m != params.m {
            return Err(SavedGraphError::OtherM {
                saved: manifest.m,
                now: params.m,
            });
        }
        let ids_path = folder.join(IDS_FILE);
        let ids = read_ids(&ids_path).map_err(|e| io_error("read", &ids_path, e))?;
        if ids.len() != manifest.points {
            return Err(SavedGraphError::IdCount {
                path: ids_path.display().to_string(),
                ids: ids.len(),
                points: manifest.points,
            });
        }
        Ok(Some(ids))
    }

    /// The agent's saved graph of `points` points of `dim` floats, once its files are checked
    /// against their manifest.
    pub fn load_graph(
        &self,
        agent: &str,
        points: usize,
        dim: usize,
    ) -> Result<Hnsw<'static, f32, UnitDot>, SavedGraphError> {
        let _no_save_meanwhile = self.saving.lock_recovered();
        let folder = self.folder(agent, "");
        let manifest = read_manifest(&folder)?.ok_or(SavedGraphError::Gone)?;
        if (manifest.points, manifest.dim) != (points, dim) {
            return Err(SavedGraphError::OtherShape {
                points: manifest.points,
                dim: manifest.dim,
                want_points: points,
                want_dim: dim,
            });
        }
        for file in &manifest.files {
            let path = folder.join(&file.name);
            let (bytes, crc32) = checksum(&path).map_err(|e| io_error("read", &path, e))?;
            if (bytes, crc32) != (file.bytes, file.crc32) {
                return Err(SavedGraphError::Changed(path.display().to_string()));
            }
        }
        let reader = HnswIo::new(&folder, BASENAME);
        let graph = catch_unwind(AssertUnwindSafe(|| {
            reader.load_hnsw_with_dist::<f32, UnitDot>(UnitDot)
        }))
        .map_err(|_| SavedGraphError::PanickedReading(folder.display().to_string()))?
        .map_err(|e| SavedGraphError::NotRead {
            path: folder.display().to_string(),
            reason: e.to_string(),
        })?;
        // SAFETY: the graph borrows from the reader only for memory-mapped data, which the
        // default reload options used above never map: every point owns its vector
        // (hnsw_rs's PointData::V), so the graph outlives the reader without pointing into it.
        let graph: Hnsw<'static, f32, UnitDot> = unsafe {
            std::mem::transmute::<Hnsw<'_, f32, UnitDot>, Hnsw<'static, f32, UnitDot>>(graph)
        };
        drop(reader);
        if graph.get_nb_point() != points {
            return Err(SavedGraphError::PointCount {
                has: graph.get_nb_point(),
                want: points,
            });
        }
        Ok(graph)
    }
}

/// The manifest in `folder`, `None` when there is none.
fn read_manifest(folder: &Path) -> Result<Option<Manifest>, SavedGraphError> {
    let path = folder.join(MANIFEST_FILE);
    let text = match fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("read", &path, e)),
    };
    let manifest: Manifest =
        serde_json::from_slice(&text).map_err(|e| SavedGraphError::NotAManifest {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    if manifest.format != FORMAT {
        return Err(SavedGraphError::OtherFormat(manifest.format));
    }
    Ok(Some(manifest))
}

fn io_error(action: &'static str, path: &Path, error: std::io::Error) -> SavedGraphError {
    SavedGraphError::Io {
        action,
        path: path.display().to_string(),
        source: error,
    }
}

fn checksum(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            return Ok((bytes, hasher.finalize()));
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
}

fn write_ids(path: &Path, ids: &[u64]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for id in ids {
        out.write_all(&id.to_le_bytes())?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

fn read_ids(path: &Path) -> std::io::Result<Vec<u64>> {
    let raw = fs::read(path)?;
    if raw.len() % 8 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a whole number of ids",
        ));
    }
    Ok(raw
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::index::clustered_unit_vectors;
    use std::collections::HashSet;

    const PARAMS: HnswParams = HnswParams {
        m: 12,
        ef_construction: 80,
        ef_search: 48,
    };

    fn graph_of(n: usize) -> VectorIndex {
        let items = clustered_unit_vectors(n, 16, 7)
            .into_iter()
            .enumerate()
            .map(|(i, v)| (1000 + i as u64 * 3, v))
            .collect();
        VectorIndex::build(16, items, PARAMS, 0)
    }

    /// The saved graph as a whole index again, as the memory service assembles it.
    fn reload(
        saved: &SavedIndexes,
        agent: &str,
        params: HnswParams,
    ) -> Result<VectorIndex, SavedGraphError> {
        let ids = saved
            .saved_ids(agent, params)?
            .ok_or(SavedGraphError::Gone)?;
        let vectors = clustered_unit_vectors(600, 16, 7);
        let items = ids
            .iter()
            .map(|id| (*id, vectors[((id - 1000) / 3) as usize].clone()))
            .collect();
        let mut index = VectorIndex::waiting_for_graph(16, items, params, 0);
        let graph = saved.load_graph(agent, ids.len(), 16)?;
        index.attach_graph(graph, ids.len(), GraphOrigin::Loaded);
        Ok(index)
    }

    #[test]
    fn a_saved_graph_loads_back_with_the_same_answers_and_takes_new_points() {
        let dir = tempfile::tempdir().unwrap();
        let saved = SavedIndexes::new(dir.path().join("hnsw"));
        let original = graph_of(600);
        assert!(matches!(saved.save("agent/1", &original), Ok(600)));
        // Nothing is left of the temporary folder, and the agent's id is not a path.
        let names: Vec<String> = fs::read_dir(dir.path().join("hnsw"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["6167656e742f31".to_string()]);
        let mut loaded = reload(&saved, "agent/1", PARAMS).unwrap();
        assert!(loaded.is_graph());
        assert_eq!(loaded.origin(), Some(GraphOrigin::Loaded));
        assert_eq!(loaded.len(), 600);
        let none = HashSet::new();
        for query in clustered_unit_vectors(20, 16, 99) {
            assert_eq!(
                original.search(&query, 5, &none),
                loaded.search(&query, 5, &none)
            );
        }
        let newcomer = clustered_unit_vectors(1, 16, 5).remove(0);
        loaded.insert(7, &newcomer);
        assert_eq!(loaded.search(&newcomer, 1, &none)[0].id, 7);
        // Saving again replaces the earlier files.
        assert!(matches!(saved.save("agent/1", &loaded), Ok(601)));
        assert_eq!(
            saved.saved_ids("agent/1", PARAMS).unwrap().unwrap().len(),
            601
        );
        assert!(matches!(saved.saved_ids("someone else", PARAMS), Ok(None)));
    }

    fn graph_error(saved: &SavedIndexes, points: usize) -> String {
        saved
            .load_graph("a", points, 16)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_damaged_or_mismatched_save_is_refused_before_hnsw_rs_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let saved = SavedIndexes::new(dir.path().to_path_buf());
        saved.save("a", &graph_of(300)).unwrap();
        let other_m = HnswParams { m: 16, ..PARAMS };
        assert!(saved
            .saved_ids("a", other_m)
            .unwrap_err()
            .to_string()
            .contains("m = 12"));
        assert!(graph_error(&saved, 299).contains("not 299"));
        let data = saved.folder("a", "").join("graph.hnsw.data");
        let mut raw = fs::read(&data).unwrap();
        raw[100] ^= 0xff;
        fs::write(&data, &raw).unwrap();
        let error = graph_error(&saved, 300);
        assert!(error.contains("changed since it was saved"), "{error}");
        fs::write(&data, &raw[..raw.len() / 2]).unwrap();
        assert!(!graph_error(&saved, 300).is_empty());
        fs::write(saved.folder("a", "").join(MANIFEST_FILE), b"{").unwrap();
        let error = saved.saved_ids("a", PARAMS).unwrap_err().to_string();
        assert!(error.contains("not a manifest"), "{error}");
        // An exact-search index has no graph to save.
        let small = VectorIndex::build(2, vec![(1, vec![1.0, 0.0])], PARAMS, 10);
        assert!(matches!(saved.save("b", &small), Ok(0)));
        assert!(matches!(saved.saved_ids("b", PARAMS), Ok(None)));
    }
}
