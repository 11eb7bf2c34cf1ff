//! Searching memories: an agent's own, or several places at once (its thread's and its
//! server's), with the query embedded once; pinned memories always come back; recalled hits read
//! back with their texts from where each is kept.

use super::{
    from_bytes, index, key, prefix, Memory, MemoryError, MemoryPlace, MemoryRecord, Payer,
};
use crate::core::memory::{MemoryHit, MemoryOrigin, MemoryScope};
use crate::llm::embed::EmbedPurpose;
use crate::locks::RwLockRecovered;

impl Memory {
    /// The `k` memories of this agent most similar to `query`; pinned memories are added
    /// (marked) whatever their similarity.
    pub async fn search(
        &self,
        payer: &Payer,
        query: &str,
        k: usize,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let own = [MemoryPlace::agent(&payer.agent)];
        self.search_at(payer, &own, query, k).await
    }

    /// `search` over several places (an agent's own memories, its thread's and its server's),
    /// with the query embedded once and paid by `payer`: the `k` most similar of them all, and
    /// every pinned one.
    pub async fn search_at(
        &self,
        payer: &Payer,
        places: &[MemoryPlace],
        query: &str,
        k: usize,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let query_vector = self.embed_one(payer, query, EmbedPurpose::Query).await?;
        self.search_vector(places, &query_vector, k).await
    }

    /// `search_at` for a query already embedded.
    pub(super) async fn search_vector(
        &self,
        places: &[MemoryPlace],
        query_vector: &[f32],
        k: usize,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let mut hits = Vec::with_capacity(k);
        for place in places {
            // A thread or server with no memories is not worth an index in the cache.
            if place.scope != MemoryScope::Agent && !self.has_any(&place.key) {
                continue;
            }
            hits.extend(self.most_similar(&place.key, query_vector, k).await?);
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(k);
        for place in places {
            self.add_pinned(&place.key, query_vector, &mut hits)?;
        }
        Ok(hits)
    }

    /// The `k` memories kept under `key` most similar to the query, forgotten ones left out.
    async fn most_similar(
        &self,
        key: &str,
        query_vector: &[f32],
        k: usize,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let (index, forgotten) = self.index_of(key).await?;
        let found = index.read_recovered().search(query_vector, k, &forgotten);
        let mut hits = Vec::with_capacity(found.len());
        for scored in found {
            if let Some(record) = self.record(key, scored.id)? {
                if !record.forgotten {
                    hits.push(hit(record, scored.score));
                }
            }
        }
        Ok(hits)
    }

    /// Adds the memories pinned under `key` that `hits` lacks, scored against the query.
    fn add_pinned(
        &self,
        key_of_place: &str,
        query_vector: &[f32],
        hits: &mut Vec<MemoryHit>,
    ) -> Result<(), MemoryError> {
        for item in self.pins.scan_prefix(prefix(key_of_place)) {
            let (k, _) = item?;
            let id = u64::from_str_radix(
                std::str::from_utf8(&k[key_of_place.len() + 1..]).unwrap_or("0"),
                16,
            )
            .unwrap_or(0);
            if hits.iter().any(|h| h.id == id) {
                continue;
            }
            if let Some(record) = self.record(key_of_place, id)? {
                let score = self
                    .vectors
                    .get(key(key_of_place, id))?
                    .map(|raw| index::dot(query_vector, &from_bytes(&raw)))
                    .unwrap_or(0.0);
                if !record.forgotten {
                    hits.push(hit(record, score));
                }
            }
        }
        Ok(())
    }

    /// Whether anything is stored under `key`.
    pub(super) fn has_any(&self, key_of_place: &str) -> bool {
        self.records
            .scan_prefix(prefix(key_of_place))
            .next()
            .is_some()
    }

    /// `hits` read back from an agent's record, with their texts from this store again; a hit
    /// whose memory was forgotten meanwhile (or cannot be read) is left out.
    pub fn with_texts(&self, agent: &str, hits: Vec<MemoryHit>) -> Vec<MemoryHit> {
        hits.into_iter()
            .filter_map(|found| match self.record(found.kept_under(agent), found.id) {
                Ok(Some(record)) if !record.forgotten => Some(MemoryHit {
                    text: record.text,
                    ..found
                }),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(agent, memory = found.id, error = %e, "cannot read a recalled memory back");
                    None
                }
            })
            .collect()
    }
}

fn hit(record: MemoryRecord, score: f32) -> MemoryHit {
    let origin =
        (record.scope != MemoryScope::Agent || record.added_by.is_some()).then(|| MemoryOrigin {
            scope: record.scope,
            kept_under: record.agent.clone(),
            added_by: record.added_by.as_ref().map(|stamp| stamp.by.name.clone()),
        });
    MemoryHit {
        origin,
        id: record.id,
        cycle: record.cycle,
        source: record.source,
        text: record.text,
        score,
        pinned: record.pinned,
    }
}
