//! A cycle's memory and its recall query in one embeddings request, when one model embeds both:
//! each text gets its own vector back, a failure loses neither, every reservation is closed, and
//! an agent that cycles asks the endpoint about once a cycle instead of twice.

use std::sync::atomic::Ordering;

use crate::memory::{fact_from_cycle_3_recalled_at_cycle_40, fixture_in, payer, remember_password};
use autothread::core::memory::MemorySource;
use autothread::memory::MemoryPlace;

/// The query's vector finds what was stored before, the memory is stored with its own vector,
/// and when the request fails the memory is queued and the recall finds nothing. A joined call
/// that will not run gives its reservation back, or writes its memory alone when only the recall
/// is dropped. With two models (E5-style), nothing stored to search, or memories queued, the two
/// are not joined.
#[tokio::test]
async fn a_memory_and_its_recall_query_share_one_request_and_a_failure_loses_neither() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    let a = payer("agent-a", "g1");
    let places = vec![MemoryPlace::agent(&a.agent)];
    let join = |cycle, text: &str, query: &str| {
        f.memory
            .prepare_joined(&a, cycle, text, places.clone(), query)
    };
    let open_reservations = || f.budgets.ledger().open_reservations().unwrap().len();
    assert!(join(1, "Lunch is at noon", "lunch").is_none(), "two models");
    f.embedder.one_model.store(true, Ordering::SeqCst);
    assert!(
        join(1, "Lunch is at noon", "lunch").is_none(),
        "nothing stored to search: no query is paid for"
    );
    let password = remember_password(&f, &a).await;
    let ferry = f
        .memory
        .remember(
            &a,
            4,
            MemorySource::Cycle,
            "The ferry to Skye leaves at 7:40",
        )
        .await
        .unwrap();

    // The memory shares words with the ferry's, the query with the password's: vectors paired
    // with the wrong texts would find the ferry first.
    let memory_text = "The ferry to Skye is cancelled on Mondays";
    let calls = f.embedder.calls.load(Ordering::SeqCst);
    let joined = join(5, memory_text, "what is the launch password").unwrap();
    f.budgets.make_durable().await.unwrap();
    let (hits, memory) = f.memory.recall_joined(joined).await;
    assert_eq!(f.embedder.calls.load(Ordering::SeqCst), calls + 1);
    assert_eq!(
        f.embedder.inputs.lock().unwrap().last().unwrap(),
        &[memory_text, "what is the launch password"]
    );
    assert_eq!(hits[0].id, password, "{hits:?}");
    assert!(hits.iter().any(|h| h.id == ferry), "{hits:?}");
    let cancelled = f.memory.keep_joined(memory).unwrap();
    let found = f.memory.search(&a, memory_text, 1).await.unwrap();
    assert_eq!((found[0].id, found[0].cycle), (cancelled, 5));
    assert!(
        found[0].score > 0.99,
        "stored with its own vector: {found:?}"
    );
    assert_eq!(open_reservations(), 0);

    // Neither part will run: the reservation is given back.
    let unused = join(6, "The museum closes on Mondays", "museum").unwrap();
    assert_eq!(open_reservations(), 1);
    f.memory.abandon_joined(&unused);
    assert_eq!(open_reservations(), 0);
    // Only the recall is dropped (the bot shuts down): the memory is still written, alone.
    let alone = join(6, "The museum closes on Mondays", "museum").unwrap();
    f.budgets.make_durable().await.unwrap();
    let museum = f
        .memory
        .remember_prepared(alone.into_remember())
        .await
        .unwrap();
    assert_eq!(
        f.embedder.inputs.lock().unwrap().last().unwrap(),
        &["The museum closes on Mondays"]
    );
    let found = f
        .memory
        .search(&a, "museum closes mondays", 1)
        .await
        .unwrap();
    assert_eq!(found[0].id, museum);
    assert_eq!(open_reservations(), 0);

    f.embedder.down.store(true, Ordering::SeqCst);
    let joined = join(7, "The bakery opens at six", "bakery").unwrap();
    let (hits, memory) = f.memory.recall_joined(joined).await;
    assert!(hits.is_empty());
    assert!(f.memory.keep_joined(memory).is_err());
    assert_eq!(f.memory.pending_count("agent-a"), 1, "queued, not lost");
    assert_eq!(open_reservations(), 0);
    // With a memory queued, a recall writes the queue first, so it is not joined.
    f.embedder.down.store(false, Ordering::SeqCst);
    assert!(join(8, "The harbour closes at ten", "harbour").is_none());
}

/// An agent that cycles with one model for memories and queries: each cycle's memory rides on
/// its next recall's request, and the fact from cycle 3 is still recalled at cycle 40.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_is_recalled_as_well_when_each_memory_rides_on_a_recall_request() {
    let f = fact_from_cycle_3_recalled_at_cycle_40(true).await;
    let inputs = f.embedder.inputs.lock().unwrap().clone();
    let joined = inputs.iter().filter(|texts| texts.len() == 2).count();
    // Alone go the first memory (nothing is stored for its cycle's recall to search; its write
    // may also still be on its way at the next step), the last (no recall follows `finish`) and
    // the resumed cycle's recall (no memory precedes it): 41 requests here, 37 of them joined,
    // where apart it takes about 78.
    assert!(
        joined >= 35 && inputs.len() <= 44,
        "{} requests, {joined} of them joined",
        inputs.len()
    );
    assert_eq!(f.budgets.ledger().open_reservations().unwrap().len(), 0);
}
