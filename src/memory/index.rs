//! One agent's vector index (`VectorIndex`), derived from its stored memories: exact search below a
//! measured size (`exact_below`), an HNSW graph (hnsw_rs with `UnitDot`, our AVX2/FMA dot product
//! on unit vectors) above it. Either can be rebuilt from the store at any time; hnsw_rs cannot
//! delete, so forgotten memories are skipped at search time.
//!
//! An index can wait for its graph (`waiting_for_graph`): it answers by exact search until
//! `attach_graph` hands it a graph built or loaded elsewhere, which then takes the points added
//! meanwhile; `origin` says whether the graph was built or loaded.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::hnsw::Hnsw;

/// HNSW construction and search parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HnswParams {
    pub m: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
}

/// Layers of the graph; 16 is what hnsw_rs recommends and plenty for millions of points.
const MAX_LAYERS: usize = 16;

/// 1 − cosine on unit vectors, with the dot product below. anndists' own `DistDot` keeps one SIMD
/// accumulator (each addition waits for the previous one) and asserts on rounding; measured here,
/// distance evaluation is most of a graph search, so the kernel is ours.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitDot;

impl Distance<f32> for UnitDot {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

enum Graph {
    Exact,
    Hnsw(Box<Hnsw<'static, f32, UnitDot>>),
}

/// Where an index's graph came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphOrigin {
    Built,
    /// Read from the files a previous run saved.
    Loaded,
}

pub struct VectorIndex {
    dim: usize,
    /// Memory ids by position; vectors are stored flat, `dim` floats each.
    ids: Vec<u64>,
    vectors: Vec<f32>,
    graph: Graph,
    params: HnswParams,
    exact_below: usize,
    /// A graph is being made for this index elsewhere (loaded or built on the blocking pool):
    /// searches are exact until it is attached, and inserts don't start a build of their own.
    graph_pending: bool,
    origin: Option<GraphOrigin>,
    /// Points in the graph as last saved: what a restart would find on disk.
    saved_len: AtomicUsize,
}

/// A search result: the memory id and its cosine similarity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub id: u64,
    pub score: f32,
}

impl VectorIndex {
    /// Builds the index of `(id, unit vector)` pairs: exact below `exact_below`, else HNSW
    /// (inserted in parallel; hnsw_rs uses rayon).
    pub fn build(
        dim: usize,
        items: Vec<(u64, Vec<f32>)>,
        params: HnswParams,
        exact_below: usize,
    ) -> VectorIndex {
        let mut index = VectorIndex::waiting_for_graph(dim, items, params, exact_below);
        index.graph_pending = false;
        if index.ids.len() >= exact_below {
            index.graph = Graph::Hnsw(Box::new(Self::build_graph(dim, &index.vectors, params)));
            index.origin = Some(GraphOrigin::Built);
        }
        index
    }

    /// An index that searches exactly until `attach_graph` gives it the graph being made for it,
    /// so an agent with many memories can search at once after a start.
    pub fn waiting_for_graph(
        dim: usize,
        items: Vec<(u64, Vec<f32>)>,
        params: HnswParams,
        exact_below: usize,
    ) -> VectorIndex {
        let mut index = VectorIndex {
            dim,
            ids: Vec::with_capacity(items.len()),
            vectors: Vec::with_capacity(items.len() * dim),
            graph: Graph::Exact,
            params,
            exact_below,
            graph_pending: true,
            origin: None,
            saved_len: AtomicUsize::new(0),
        };
        for (id, vector) in items {
            debug_assert_eq!(vector.len(), dim);
            index.ids.push(id);
            index.vectors.extend_from_slice(&vector);
        }
        index
    }

    /// A graph of `vectors` (`dim` floats each), each point named by its position.
    pub fn build_graph(
        dim: usize,
        vectors: &[f32],
        params: HnswParams,
    ) -> Hnsw<'static, f32, UnitDot> {
        let points = vectors.len() / dim.max(1);
        let graph = Hnsw::new(
            params.m,
            (points * 2).max(1024),
            MAX_LAYERS,
            params.ef_construction,
            UnitDot,
        );
        let rows: Vec<(&[f32], usize)> = vectors
            .chunks_exact(dim.max(1))
            .enumerate()
            .map(|(position, v)| (v, position))
            .collect();
        graph.parallel_insert_slice(&rows);
        graph
    }

    /// The vectors a graph is built from, copied so inserts go on while it is built.
    pub fn vectors_for_graph(&self) -> Vec<f32> {
        self.vectors.clone()
    }

    /// Gives the index a graph of its first `covers` points, adding the points that came since.
    pub fn attach_graph(
        &mut self,
        graph: Hnsw<'static, f32, UnitDot>,
        covers: usize,
        origin: GraphOrigin,
    ) {
        for position in covers..self.ids.len() {
            let vector = &self.vectors[position * self.dim..(position + 1) * self.dim];
            graph.insert_slice((vector, position));
        }
        self.graph = Graph::Hnsw(Box::new(graph));
        self.graph_pending = false;
        self.origin = Some(origin);
    }

    pub fn graph_pending(&self) -> bool {
        self.graph_pending
    }

    pub fn origin(&self) -> Option<GraphOrigin> {
        self.origin
    }

    /// Points in the graph as last saved.
    pub fn saved_len(&self) -> usize {
        self.saved_len.load(Ordering::Relaxed)
    }

    pub fn set_saved_len(&self, points: usize) {
        self.saved_len.store(points, Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Candidates examined per search in the graph (more: better recall, slower).
    pub fn set_ef_search(&mut self, ef: usize) {
        self.params.ef_search = ef;
    }

    pub fn is_graph(&self) -> bool {
        matches!(self.graph, Graph::Hnsw(_))
    }

    /// Whether the memory `id` is in the index.
    pub fn contains(&self, id: u64) -> bool {
        self.ids.contains(&id)
    }

    /// Adds one memory; crossing the exact-search threshold builds the graph.
    pub fn insert(&mut self, id: u64, vector: &[f32]) {
        let position = self.ids.len();
        self.ids.push(id);
        self.vectors.extend_from_slice(vector);
        match &self.graph {
            Graph::Hnsw(graph) => graph.insert_slice((vector, position)),
            Graph::Exact if !self.graph_pending && self.ids.len() >= self.exact_below => {
                let graph = Self::build_graph(self.dim, &self.vectors, self.params);
                self.graph = Graph::Hnsw(Box::new(graph));
                self.origin = Some(GraphOrigin::Built);
            }
            Graph::Exact => {}
        }
    }

    fn vector(&self, position: usize) -> &[f32] {
        &self.vectors[position * self.dim..(position + 1) * self.dim]
    }

    /// The `k` most similar memories not in `skip`, most similar first.
    pub fn search(&self, query: &[f32], k: usize, skip: &HashSet<u64>) -> Vec<Scored> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        match &self.graph {
            Graph::Exact => self.exact(query, k, skip),
            Graph::Hnsw(graph) => {
                // Forgotten memories are still in the graph: ask for enough extra to fill k.
                let wanted = k + skip.len().min(k * 4);
                let ef = self.params.ef_search.max(wanted);
                let mut found: Vec<Scored> = graph
                    .search(query, wanted, ef)
                    .into_iter()
                    .filter_map(|n| {
                        let id = *self.ids.get(n.d_id)?;
                        (!skip.contains(&id)).then_some(Scored {
                            id,
                            score: 1.0 - n.distance,
                        })
                    })
                    .collect();
                found.truncate(k);
                found
            }
        }
    }

    /// Every vector compared: the reference for recall, and the fastest path for small agents.
    pub fn exact(&self, query: &[f32], k: usize, skip: &HashSet<u64>) -> Vec<Scored> {
        let mut best: Vec<Scored> = Vec::with_capacity(k + 1);
        for (position, id) in self.ids.iter().enumerate() {
            if skip.contains(id) {
                continue;
            }
            let score = dot(query, self.vector(position));
            if best.len() == k && best.last().is_some_and(|w| w.score >= score) {
                continue;
            }
            let at = best.partition_point(|b| b.score >= score);
            best.insert(at, Scored { id: *id, score });
            best.truncate(k);
        }
        best
    }

    /// The graph, when the index has one (saving it needs it).
    pub(super) fn graph(&self) -> Option<&Hnsw<'static, f32, UnitDot>> {
        match &self.graph {
            Graph::Hnsw(graph) => Some(graph),
            Graph::Exact => None,
        }
    }

    pub fn params(&self) -> HnswParams {
        self.params
    }

    /// Memory ids by graph position.
    pub(super) fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// Bytes held by the vectors and ids (the graph's links come on top when it exists).
    pub fn vector_bytes(&self) -> usize {
        self.vectors.len() * 4 + self.ids.len() * 8
    }
}

/// The dot product: AVX2 with FMA when the CPU has them (checked once, then cached by std),
/// otherwise a portable loop with independent sums the compiler can vectorise.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return unsafe { dot_avx2_fma(a, b) };
        }
    }
    dot_portable(a, b)
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut sums = [0.0f32; 8];
    let mut chunks_a = a.chunks_exact(8);
    let mut chunks_b = b.chunks_exact(8);
    for (x, y) in (&mut chunks_a).zip(&mut chunks_b) {
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    sums.iter().sum::<f32>() + tail
}

/// Four independent 8-lane accumulators, so the fused multiply-adds do not wait on each other.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY (for every load below): i + 8·(lane + 1) ≤ n, so each 8-float load stays within both slices.
    while i + 32 <= n {
        for (lane, sum) in acc.iter_mut().enumerate() {
            let x = unsafe { _mm256_loadu_ps(pa.add(i + 8 * lane)) };
            let y = unsafe { _mm256_loadu_ps(pb.add(i + 8 * lane)) };
            *sum = _mm256_fmadd_ps(x, y, *sum);
        }
        i += 32;
    }
    while i + 8 <= n {
        let x = unsafe { _mm256_loadu_ps(pa.add(i)) };
        let y = unsafe { _mm256_loadu_ps(pb.add(i)) };
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let mut total: f32 = lanes.iter().sum();
    for k in i..n {
        total += a[k] * b[k];
    }
    total
}

/// Seeded clustered unit vectors, like embeddings of texts on a limited set of topics: 200 fixed
/// centres, each point a centre plus uniform noise (pure noise would make all neighbours equally
/// far and tell nothing about an index). The recall test and the benchmark share it.
pub fn clustered_unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    use rand::{Rng, SeedableRng};
    let mut centres_rng = rand::rngs::StdRng::seed_from_u64(42);
    let centres: Vec<Vec<f32>> = (0..200)
        .map(|_| {
            (0..dim)
                .map(|_| centres_rng.random_range(-1.0f32..1.0))
                .collect()
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let centre = &centres[rng.random_range(0..centres.len())];
            let mut v: Vec<f32> = centre
                .iter()
                .map(|c| c + rng.random_range(-0.6f32..0.6))
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: Vec<f32>) -> Vec<f32> {
        crate::llm::embed::normalise(v).unwrap()
    }

    #[test]
    fn exact_and_graph_agree_on_a_small_set_and_skip_forgotten_ids() {
        let items: Vec<(u64, Vec<f32>)> = (0..300u64)
            .map(|i| {
                let a = i as f32 * 0.05;
                (
                    i + 1000,
                    unit(vec![a.cos(), a.sin(), 0.3, (i % 7) as f32 * 0.01]),
                )
            })
            .collect();
        let params = HnswParams {
            m: 16,
            ef_construction: 100,
            ef_search: 64,
        };
        let exact = VectorIndex::build(4, items.clone(), params, usize::MAX);
        let graph = VectorIndex::build(4, items, params, 100);
        assert!(!exact.is_graph() && graph.is_graph());
        let query = unit(vec![1.0, 0.0, 0.3, 0.0]);
        let none = HashSet::new();
        let a = exact.search(&query, 5, &none);
        let b = graph.search(&query, 5, &none);
        assert_eq!(a.len(), 5);
        assert_eq!(
            a.iter().map(|s| s.id).collect::<Vec<_>>(),
            b.iter().map(|s| s.id).collect::<Vec<_>>()
        );
        assert!(a.windows(2).all(|w| w[0].score >= w[1].score));
        let skip: HashSet<u64> = [a[0].id].into();
        let c = graph.search(&query, 5, &skip);
        assert!(!c.iter().any(|s| s.id == a[0].id));
        assert_eq!(c.len(), 5);
        // A wrong-sized query finds nothing rather than panicking.
        assert!(graph.search(&[1.0], 5, &none).is_empty());
    }

    #[test]
    fn inserting_past_the_threshold_builds_the_graph() {
        let params = HnswParams {
            m: 8,
            ef_construction: 50,
            ef_search: 32,
        };
        let mut index = VectorIndex::build(2, Vec::new(), params, 10);
        for i in 0..12u64 {
            let a = i as f32;
            index.insert(i, &unit(vec![a.cos(), a.sin()]));
        }
        assert!(index.is_graph());
        assert_eq!(index.len(), 12);
        let hits = index.search(&unit(vec![1.0, 0.0]), 1, &HashSet::new());
        assert_eq!(hits[0].id, 0);
        assert!((dot(&[1.0; 19], &[2.0; 19]) - 38.0).abs() < 1e-5);
        // The SIMD kernel and the portable loop agree on every length around the block sizes.
        for n in [0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 384] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            assert!((dot(&a, &b) - dot_portable(&a, &b)).abs() < 1e-4, "{n}");
        }
        assert_eq!(UnitDot.eval(&[1.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}
