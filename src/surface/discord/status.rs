//! The live status message at the top of each agent's thread: posted once and pinned, then edited
//! in place as the agent moves (thinking, waiting for approval, running a command, waiting for a
//! rate limit), with its cycle, spend and sub-agents. All agents' status requests go through one
//! paced loop, so a thousand busy agents stay within Discord's rate limits; typing is renewed there
//! too while the model or a command works.
//!
//! `StatusBoard` keeps each agent's latest `LiveStatus` and a running command's progress; a
//! thinking agent's streamed pieces are counted ("thinking… (n tokens)").
//! `DiscordSurface::run_status_loop` makes at most `discord.status_requests_per_second` requests
//! for all agents together, in this order of priority: post a missing status message (under the
//! nonce `<agent>.status`) and pin it, its id saved in the store (after a restart that lost the id,
//! the thread's pins and then its newest messages are searched for it); edit the stalest changed
//! status (each message at most every `MIN_EDIT_GAP`); renew typing (every `TYPING_RENEWAL`) for
//! agents whose model or command is at work, not for `ask_user`, which waits for a person; refresh
//! a busy agent's clock (every `CLOCK_EDIT_GAP`). Changes come before clocks, so under load
//! statuses stay right and only their clocks lag. A post that fails is tried again after a wait
//! that doubles (`FIRST_POST_WAIT` to `MAX_POST_WAIT`), so a thread the bot can no longer write to
//! does not take every turn. A finished or paused agent's entry is dropped after its last edit; a
//! deleted status message is posted again under a fresh nonce.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serenity::all::{ChannelId, CreateEmbed, CreateMessage, EditMessage, MessageId};

use super::post;
use crate::core::budget::format_usd;
use crate::locks::LockRecovered;
use crate::runtime::{Doing, LiveStatus};
use crate::store::ThreadBinding;

/// The status message's title starts with this; it is how a restart finds a status message it
/// posted but did not live to remember.
pub(super) const STATUS_TITLE: &str = "📌 Live status";

/// Whether an embed's title is a live status message's.
fn is_status_title(title: &str) -> bool {
    title.starts_with(STATUS_TITLE)
}

/// The least time between two edits of one status message: Discord allows about five edits in
/// five seconds per channel, and cards are edited in the same channel.
const MIN_EDIT_GAP: Duration = Duration::from_secs(5);
/// How often the status of a busy agent is edited again for its clock ("for 40 s") alone.
const CLOCK_EDIT_GAP: Duration = Duration::from_secs(15);
/// Discord shows typing for about ten seconds; it is renewed a little before that.
const TYPING_RENEWAL: Duration = Duration::from_secs(8);

/// One agent's live status, as the loop keeps it.
struct Entry {
    thread: u64,
    name: String,
    status: LiveStatus,
    /// Who may decide on its cards, as mentions (an embed's mentions notify nobody).
    approvers: String,
    /// The running command's own progress, while it runs.
    progress: Option<String>,
    /// Pieces of the reply the model streams while the agent thinks (about one token each).
    streamed: u64,
    /// The status message, once known (posted, found or read from the store).
    message: Option<u64>,
    /// Whether the status changed since the message last showed it.
    dirty: bool,
    /// Failed attempts to post the status message, and when to try again: a thread the bot can
    /// no longer write to must not take every turn of the loop (Discord bans a bot that makes
    /// too many failing requests).
    post_failures: u32,
    next_post: Option<Instant>,
    /// The status message was deleted in Discord: its replacement needs a nonce of its own.
    replaced: bool,
    last_edit: Option<Instant>,
    last_typing: Option<Instant>,
}

/// What the loop does next.
enum Job {
    Post { agent: String },
    Edit { agent: String },
    Typing { thread: u64 },
}

/// Every agent's live status; the loop (`DiscordSurface::run_status_loop`) turns it into requests.
#[derive(Default)]
pub(super) struct StatusBoard {
    entries: Mutex<HashMap<String, Entry>>,
    /// Threads the bot archived: a message there would open them again (Discord reopens an
    /// archived thread on any new message), so a resting agent's status is not shown in them
    /// until the agent is live again.
    archived: Mutex<std::collections::HashSet<u64>>,
}

/// At this many archived threads remembered the set starts again: a status posted in a thread
/// archived long ago is the worst that can happen, and it bounds the set.
const ARCHIVED_REMEMBERED: usize = 65_536;

impl StatusBoard {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock_recovered()
    }

    /// Takes an agent's new status; an agent not on the board yet is placed by `binding`, read
    /// only then.
    pub(super) fn update(
        &self,
        agent: &str,
        name: &str,
        status: &LiveStatus,
        binding: impl FnOnce() -> Option<ThreadBinding>,
    ) {
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(agent) {
            if !matches!(status.doing, Doing::Running { .. }) || entry.status.doing != status.doing
            {
                entry.progress = None;
            }
            entry.status = status.clone();
            entry.name = name.to_string();
            entry.dirty = true;
            return;
        }
        let Some(binding) = binding() else { return };
        {
            let mut archived = self.archived.lock_recovered();
            if status.doing.is_resting() {
                if archived.contains(&binding.thread_id) {
                    return;
                }
            } else {
                archived.remove(&binding.thread_id);
            }
        }
        entries.insert(
            agent.to_string(),
            Entry {
                thread: binding.thread_id,
                name: name.to_string(),
                status: status.clone(),
                approvers: approvers(&binding),
                progress: None,
                streamed: 0,
                message: None,
                dirty: true,
                post_failures: 0,
                next_post: None,
                replaced: false,
                last_edit: None,
                last_typing: None,
            },
        );
    }

    /// The bot is archiving `thread`: its status is left as it is, and nothing more is shown
    /// there while its agent rests.
    pub(super) fn thread_archived(&self, thread: u64) {
        self.entries().retain(|_, entry| entry.thread != thread);
        let mut archived = self.archived.lock_recovered();
        if archived.len() >= ARCHIVED_REMEMBERED {
            archived.clear();
        }
        archived.insert(thread);
    }

    /// A running command's progress.
    pub(super) fn progress(&self, agent: &str, text: &str) {
        if let Some(entry) = self.entries().get_mut(agent) {
            if matches!(entry.status.doing, Doing::Running { .. }) {
                entry.progress = Some(text.to_string());
                entry.dirty = true;
            }
        }
    }

    /// A piece of the reply the model is streaming for `agent`.
    pub(super) fn streamed(&self, agent: &str) {
        if let Some(entry) = self.entries().get_mut(agent) {
            entry.streamed += 1;
            entry.dirty = true;
        }
    }

    /// Typing was just shown in `agent`'s thread by other means (the start of a model call).
    pub(super) fn typed(&self, agent: &str) {
        if let Some(entry) = self.entries().get_mut(agent) {
            entry.last_typing = Some(Instant::now());
        }
    }

    /// The next request to make: a status message to post, then the stalest change due, then
    /// typing to renew, then a busy agent's clock. Changes come before clocks, so under load the
    /// statuses stay right and only their clocks lag.
    fn next_job(&self, now: Instant) -> Option<Job> {
        let entries = self.entries();
        let due = |last: Option<Instant>, gap: Duration| {
            last.is_none_or(|at| now.duration_since(at) >= gap)
        };
        let to_post = entries
            .iter()
            .find(|(_, e)| e.message.is_none() && e.next_post.is_none_or(|at| at <= now));
        if let Some((agent, _)) = to_post {
            return Some(Job::Post {
                agent: agent.clone(),
            });
        }
        let stalest = |wanted: &dyn Fn(&Entry) -> bool| {
            entries
                .iter()
                .filter(|(_, e)| e.message.is_some() && wanted(e))
                .min_by_key(|(_, e)| e.last_edit)
                .map(|(agent, _)| Job::Edit {
                    agent: agent.clone(),
                })
        };
        if let Some(job) = stalest(&|e| e.dirty && due(e.last_edit, MIN_EDIT_GAP)) {
            return Some(job);
        }
        let typing = entries
            .values()
            .filter(|e| e.status.doing.is_busy() && due(e.last_typing, TYPING_RENEWAL))
            .min_by_key(|e| e.last_typing)
            .map(|e| Job::Typing { thread: e.thread });
        if typing.is_some() {
            return typing;
        }
        stalest(&|e| e.status.doing.is_busy() && due(e.last_edit, CLOCK_EDIT_GAP))
    }

    /// A status message could not be posted: tried again after a wait that doubles, up to
    /// `MAX_POST_WAIT`.
    fn post_failed(&self, agent: &str) {
        if let Some(entry) = self.entries().get_mut(agent) {
            entry.post_failures += 1;
            let wait = FIRST_POST_WAIT
                .saturating_mul(1 << entry.post_failures.min(10))
                .min(MAX_POST_WAIT);
            entry.next_post = Some(Instant::now() + wait);
        }
    }
}

/// The first wait after a failed post of a status message, and the longest.
const FIRST_POST_WAIT: Duration = Duration::from_secs(5);
const MAX_POST_WAIT: Duration = Duration::from_secs(600);

/// Who may decide on an agent's cards, as mentions.
fn approvers(binding: &ThreadBinding) -> String {
    let mut who = vec![format!("<@{}>", binding.owner_id)];
    who.extend(binding.shared_users.iter().map(|u| format!("<@{u}>")));
    who.extend(binding.shared_roles.iter().map(|r| format!("<@&{r}>")));
    who.join(", ")
}

/// "12 s", "3 min 5 s", "2 h 3 min".
pub(super) fn duration_words(seconds: i64) -> String {
    let seconds = seconds.max(0);
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

/// What the agent is doing, in words, at `now`.
fn doing_line(
    doing: &Doing,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
    approvers: &str,
    progress: Option<&str>,
    streamed: u64,
) -> String {
    let for_how_long = duration_words((now - since).num_seconds());
    match doing {
        Doing::Starting => format!("writing its profile ({for_how_long})"),
        Doing::Thinking if streamed > 0 => {
            format!("thinking… ({streamed} tokens, {for_how_long})")
        }
        Doing::Thinking => format!("thinking ({for_how_long})"),
        Doing::WaitingForApproval => {
            format!("waiting for approval by {approvers} ({for_how_long})")
        }
        Doing::Critiquing => format!("critiquing its proposal ({for_how_long})"),
        Doing::Running { command } => {
            let progress = progress.map_or(String::new(), |p| format!(": {p}"));
            format!("running `{command}` for {for_how_long}{progress}")
        }
        Doing::RateLimited { until, why } => format!(
            "waiting for the rate limit until {} UTC ({why})",
            until.format("%H:%M:%S")
        ),
        Doing::Paused { why } => format!("paused: {why}"),
        Doing::Finished => "finished".to_string(),
    }
}

/// The status message's embed at `now`.
fn render(entry: &Entry, now: DateTime<Utc>) -> CreateEmbed {
    let status = &entry.status;
    let soft_cap = crate::core::budget::soft_cap(status.budget, status.soft_cap_percent);
    let mut spend = format!(
        "{} of {} (runs by itself up to {})",
        format_usd(status.spent),
        format_usd(status.budget),
        format_usd(soft_cap)
    );
    if !status.reserved.is_zero() {
        spend.push_str(&format!(
            " · {} reserved for calls in flight",
            format_usd(status.reserved)
        ));
    }
    let mut lines = vec![
        format!(
            "**Now:** {}",
            doing_line(
                &status.doing,
                status.since,
                now,
                &entry.approvers,
                entry.progress.as_deref(),
                entry.streamed
            )
        ),
        format!("**Cycle:** {}", status.cycle),
        format!("**Spend:** {spend}"),
    ];
    if status.subagents > 0 {
        lines.push(format!("**Sub-agents:** {}", status.subagents));
    }
    CreateEmbed::new()
        .title(format!("{STATUS_TITLE} — {}", entry.name))
        .description(lines.join("\n"))
        .timestamp(serenity::all::Timestamp::from(now))
}

/// The status message's nonce: the same after a restart, so Discord posts it once.
fn status_nonce(agent: &str) -> String {
    format!("{agent}.status")
        .chars()
        .take(post::NONCE_MAX)
        .collect()
}

impl super::DiscordSurface {
    /// Makes the board's requests, at most `per_second` a second for all agents together, until
    /// `stop` resolves.
    pub async fn run_status_loop(
        &self,
        per_second: u32,
        stop: impl std::future::Future<Output = ()>,
    ) {
        if per_second == 0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = &mut stop => return,
            }
            let job = self.status.next_job(Instant::now());
            match job {
                Some(Job::Post { agent }) => self.post_status(&agent).await,
                Some(Job::Edit { agent }) => self.edit_status(&agent).await,
                Some(Job::Typing { thread }) => {
                    if let Err(e) = ChannelId::new(thread).broadcast_typing(&self.http).await {
                        tracing::debug!(error = %e, "cannot show typing");
                    }
                    let mut entries = self.status.entries();
                    for entry in entries.values_mut().filter(|e| e.thread == thread) {
                        entry.last_typing = Some(Instant::now());
                    }
                }
                None => {}
            }
        }
    }

    /// Finds the agent's status message (in the store, or among the thread's newest messages
    /// when a restart came between posting it and saving it), or posts and pins a new one.
    async fn post_status(&self, agent: &str) {
        let known = match self.store.status_message(agent) {
            Ok(known) => known,
            Err(e) => {
                tracing::warn!(%agent, error = %e, "cannot read the status message's id");
                None
            }
        };
        let Some(binding) = self.binding(agent) else {
            // The agent was deleted: nothing to show any more.
            self.status.entries().remove(agent);
            return;
        };
        let replaced = self.status.entries().get(agent).is_some_and(|e| e.replaced);
        let found = match known {
            Some(id) => Some(id),
            None if replaced => None,
            // Pinned when posted, so found among the pins however busy the thread has been
            // since; among the newest messages when the restart came before the pin.
            None => match self.find_pinned(&binding, is_status_title).await {
                Some(id) => Some(id),
                None => self.find_posted(&binding, is_status_title).await,
            },
        };
        let id = match found {
            Some(id) => id,
            None => {
                let Some((thread, embed)) = self.rendered(agent) else {
                    return;
                };
                let message = CreateMessage::new().embed(embed);
                // The nonce keeps a retried post to one message; a replacement gets a new one, or
                // Discord would hand back the deleted message.
                let nonce = match replaced {
                    true => post::fresh_nonce(),
                    false => status_nonce(agent),
                };
                let Some(id) = self.send_once(agent, message, nonce).await else {
                    self.status.post_failed(agent);
                    return;
                };
                if let Err(e) = ChannelId::new(thread)
                    .pin(&self.http, MessageId::new(id))
                    .await
                {
                    tracing::info!(%agent, error = %e, "the status message could not be pinned; it stays unpinned");
                }
                tracing::info!(%agent, message = id, "status message posted");
                id
            }
        };
        if known.is_none() {
            if let Err(e) = self.store.save_status_message(agent, id) {
                tracing::warn!(%agent, error = %e, "cannot save the status message's id");
            }
        }
        let mut entries = self.status.entries();
        if let Some(entry) = entries.get_mut(agent) {
            entry.message = Some(id);
            entry.post_failures = 0;
            entry.next_post = None;
            entry.replaced = false;
            if found.is_none() {
                // Just posted as it is now: no edit is due yet.
                entry.dirty = false;
                entry.last_edit = Some(Instant::now());
            }
        }
    }

    /// The agent's thread and its status as an embed now, if the board has it.
    fn rendered(&self, agent: &str) -> Option<(u64, CreateEmbed)> {
        let entries = self.status.entries();
        let entry = entries.get(agent)?;
        Some((entry.thread, render(entry, self.clock.now())))
    }

    async fn edit_status(&self, agent: &str) {
        let (thread, message, embed, done) = {
            let mut entries = self.status.entries();
            let Some(entry) = entries.get_mut(agent) else {
                return;
            };
            let Some(message) = entry.message else { return };
            entry.dirty = false;
            entry.last_edit = Some(Instant::now());
            let done = entry.status.doing.is_resting();
            (entry.thread, message, render(entry, self.clock.now()), done)
        };
        let edit = EditMessage::new()
            .embed(embed)
            .allowed_mentions(super::no_mentions());
        match ChannelId::new(thread)
            .edit_message(&self.http, MessageId::new(message), edit)
            .await
        {
            Ok(_) => {
                if done {
                    // A resting agent's status is final until it is resumed, which reports again.
                    let mut entries = self.status.entries();
                    if entries.get(agent).is_some_and(|e| !e.dirty) {
                        entries.remove(agent);
                    }
                }
            }
            Err(e) => {
                let gone = matches!(
                    &e,
                    serenity::Error::Http(serenity::all::HttpError::UnsuccessfulRequest(r))
                        if r.status_code.as_u16() == 404
                );
                let mut entries = self.status.entries();
                if let Some(entry) = entries.get_mut(agent) {
                    entry.dirty = true;
                    if gone {
                        // Someone deleted it: a new one is posted.
                        tracing::info!(%agent, message, "the status message is gone; a new one is posted");
                        entry.message = None;
                        entry.replaced = true;
                        if let Err(e) = self.store.forget_status_message(agent) {
                            tracing::warn!(%agent, error = %e, "cannot forget the status message");
                        }
                    }
                }
                tracing::debug!(%agent, error = %e, "cannot edit the status message");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::Micros;

    fn status(doing: Doing, since: DateTime<Utc>) -> LiveStatus {
        LiveStatus {
            doing,
            since,
            cycle: 4,
            spent: Micros(120_000),
            reserved: Micros::ZERO,
            budget: Micros(1_000_000),
            soft_cap_percent: 80,
            subagents: 0,
        }
    }

    fn binding() -> ThreadBinding {
        ThreadBinding {
            agent_id: "a1".into(),
            guild_id: 1,
            parent_channel_id: 2,
            thread_id: 30,
            owner_id: 10,
            shared_users: vec![11],
            shared_roles: vec![12],
            card: None,
        }
    }

    #[test]
    fn an_archived_thread_shows_no_status_while_its_agent_rests_and_again_once_it_is_live() {
        let board = StatusBoard::default();
        let now = Utc::now();
        board.update("a1", "A", &status(Doing::Thinking, now), || Some(binding()));
        board.thread_archived(30);
        // Nothing is left to post or edit there: a message would open the thread again.
        assert!(board.next_job(Instant::now()).is_none());
        board.update("a1", "A", &status(Doing::Finished, now), || Some(binding()));
        assert!(board.next_job(Instant::now()).is_none());
        // A follow-up makes the agent live: its status is shown again.
        board.update("a1", "A", &status(Doing::Thinking, now), || Some(binding()));
        assert!(matches!(
            board.next_job(Instant::now()),
            Some(Job::Post { .. })
        ));
    }

    #[test]
    fn typing_shows_while_the_model_or_a_command_works_not_while_a_person_is_asked() {
        let running = |command: &str| Doing::Running {
            command: command.into(),
        };
        assert!(Doing::Thinking.is_busy());
        assert!(running("read_webpage").is_busy());
        assert!(!running(crate::tools::control::ASK_USER).is_busy());
        assert!(!Doing::WaitingForApproval.is_busy());
    }

    #[test]
    fn a_failing_post_waits_longer_each_time_and_does_not_hold_up_other_agents() {
        let board = StatusBoard::default();
        let now = Utc::now();
        let other = ThreadBinding {
            agent_id: "a2".into(),
            thread_id: 31,
            ..binding()
        };
        board.update("a1", "NoteGPT", &status(Doing::Thinking, now), || {
            Some(binding())
        });
        board.update(
            "a2",
            "OtherGPT",
            &status(Doing::WaitingForApproval, now),
            || Some(other.clone()),
        );
        let first = match board.next_job(Instant::now()) {
            Some(Job::Post { agent }) => agent,
            _ => panic!("a post first"),
        };
        board.post_failed(&first);
        let second = match board.next_job(Instant::now()) {
            Some(Job::Post { agent }) => agent,
            _ => panic!("the other agent's post next"),
        };
        assert_ne!(first, second);
        board.post_failed(&second);
        assert!(!matches!(
            board.next_job(Instant::now()),
            Some(Job::Post { .. })
        ));
        board.post_failed(&first);
        let wait = board.entries()[&first].next_post.unwrap() - Instant::now();
        assert!(wait > FIRST_POST_WAIT * 2, "{wait:?}");
        assert!(wait <= MAX_POST_WAIT);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_words(12), "12 s");
        assert_eq!(duration_words(185), "3 min 5 s");
        assert_eq!(duration_words(7380), "2 h 3 min");
        assert_eq!(duration_words(-3), "0 s");
    }

    #[test]
    fn the_status_says_what_the_agent_does_since_when_and_for_whom() {
        let since = Utc::now();
        let later = since + chrono::Duration::seconds(12);
        let who = approvers(&binding());
        assert_eq!(who, "<@10>, <@11>, <@&12>");
        assert_eq!(
            doing_line(&Doing::WaitingForApproval, since, later, &who, None, 0),
            "waiting for approval by <@10>, <@11>, <@&12> (12 s)"
        );
        assert_eq!(
            doing_line(
                &Doing::Running {
                    command: "read_webpage".into()
                },
                since,
                later,
                &who,
                Some("reading part 2 of 5"),
                0
            ),
            "running `read_webpage` for 12 s: reading part 2 of 5"
        );
        assert_eq!(
            doing_line(&Doing::Thinking, since, later, &who, None, 37),
            "thinking… (37 tokens, 12 s)"
        );
    }

    #[test]
    fn the_board_posts_first_then_edits_what_changed_paced_and_renews_typing() {
        let board = StatusBoard::default();
        let now = Utc::now();
        board.update("a1", "NoteGPT", &status(Doing::Thinking, now), || {
            Some(binding())
        });
        assert!(matches!(
            board.next_job(Instant::now()),
            Some(Job::Post { .. })
        ));
        board.entries().get_mut("a1").unwrap().message = Some(99);
        // Posted and never edited: the first edit is due at once.
        assert!(matches!(
            board.next_job(Instant::now()),
            Some(Job::Edit { .. })
        ));
        {
            let mut entries = board.entries();
            let entry = entries.get_mut("a1").unwrap();
            entry.dirty = false;
            entry.last_edit = Some(Instant::now());
        }
        // Busy, edited just now: typing is renewed, no edit.
        assert!(matches!(
            board.next_job(Instant::now()),
            Some(Job::Typing { thread: 30 })
        ));
        board.typed("a1");
        assert!(board.next_job(Instant::now()).is_none());
        // A change waits out the least gap between edits.
        board.update(
            "a1",
            "NoteGPT",
            &status(Doing::WaitingForApproval, now),
            || Some(binding()),
        );
        assert!(board.next_job(Instant::now()).is_none());
        assert!(matches!(
            board.next_job(Instant::now() + MIN_EDIT_GAP),
            Some(Job::Edit { .. })
        ));
        // Progress shows only while a command runs, and goes with it.
        board.progress("a1", "reading part 1 of 3");
        assert!(board.entries()["a1"].progress.is_none());
        let running = status(
            Doing::Running {
                command: "read_webpage".into(),
            },
            now,
        );
        board.update("a1", "NoteGPT", &running, || Some(binding()));
        board.progress("a1", "reading part 1 of 3");
        assert_eq!(
            board.entries()["a1"].progress.as_deref(),
            Some("reading part 1 of 3")
        );
        board.update("a1", "NoteGPT", &running, || Some(binding()));
        assert!(board.entries()["a1"].progress.is_some());
        board.update("a1", "NoteGPT", &status(Doing::Thinking, now), || {
            Some(binding())
        });
        assert!(board.entries()["a1"].progress.is_none());
    }
}
