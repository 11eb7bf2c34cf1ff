//! The Discord surface (`DiscordSurface`, implementing `runtime::Surface`): every agent lives in
//! its own thread; proposals are cards with buttons, results and notices are messages, and
//! `ask_user` waits for an answer typed in the thread (`answer_question`); without the Message
//! Content intent the question asks for a reply to it, as only replies and mentions are read.
//!
//! A card is posted once and remembered after it is posted as a `CardRef`, not before: an intent
//! record would cost a durable flush per cycle. Two things keep it to one post instead. Its nonce
//! is derived from the agent and cycle and enforced, so Discord returns the stored card for a
//! re-post within its window of a few minutes; and the first proposal an agent shows after the
//! process starts searches the thread's newest messages for a card with its title and adopts it
//! (`found`), which covers an outage of any length. The card is edited in place after a decision or
//! a restart and closed by `close_card` (a decision, an expiry). An escalated deadline calls the
//! approvers (`call_approvers`): the server's approvers role, or else the agent's owner and the
//! users and roles it is shared with, and nobody else; every other message goes out with no
//! mentions. `repost_cards` posts the cards Discord did not take; a loop in `client` calls it.

mod buckets;
mod card_parts;
pub mod cards;
pub mod client;
mod commands;
mod data;
mod forms;
mod found;
pub mod ids;
mod parked;
mod people;
pub mod permissions;
mod post;
mod remember;
mod repost;
pub mod respond;
mod rewound;
mod router;
pub mod shards;
mod status;
pub mod threads;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serenity::all::{
    ChannelId, CreateAllowedMentions, CreateAttachment, CreateMessage, EditAttachments,
    EditMessage, Http, MessageId, RoleId, UserId,
};
use tokio::sync::{oneshot, Mutex};

use crate::clock::Clock;
use crate::config::MessageContent;
use crate::core::decision::Decision;
use crate::core::history::Episode;
use crate::core::person::ActedBy;
use crate::core::state::{AgentState, AgentView, PauseReason, Proposal};
use crate::locks::LockRecovered;
use crate::runtime::{AgentHandle, ShownAs, Surface};
use crate::store::{CardRef, Store, ThreadBinding};
use crate::tools::preview::{preview, Preview};
use crate::tools::{AgentFiles, NoAnswer};
pub use card_parts::{card_buttons, no_mentions, to_embed};
use cards::EmbedText;

/// How long `ask_user` waits for an answer in the thread before reporting that nobody answered.
const ASK_USER_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// How many of a thread's newest messages are searched for a card an earlier run posted but did
/// not live to remember (Discord's most per request). A waiting card is the thread's newest
/// message unless people talked under it.
const RECENT_MESSAGES_SEARCHED: u8 = 100;

/// A card as a thread shows it: where it is, the proposal and the change it shows.
struct ShownCard<'a> {
    agent: &'a str,
    name: &'a str,
    thread_id: u64,
    message_id: u64,
    proposal: &'a Proposal,
    changes: Option<&'a Preview>,
}

pub struct DiscordSurface {
    http: Arc<Http>,
    store: Store,
    /// Questions from `ask_user` waiting for an answer, by thread.
    questions: Mutex<HashMap<u64, oneshot::Sender<String>>>,
    /// Questions withdrawn before they were asked (a pause that came as the command started),
    /// by thread, with the cycle whose question it was; read and written under `questions`.
    withdrawn: std::sync::Mutex<HashMap<u64, u64>>,
    approve_n_default: u32,
    clock: Arc<dyn Clock>,
    /// Cards Discord did not take, to be posted again by `repost_cards`.
    unposted: post::Unposted,
    /// Agents shown a proposal since this process started. The first proposal shown after a
    /// start may have been posted by the run that died (after Discord stored the card, before
    /// the card's reference was saved), so only then is the thread searched for it.
    shown_since_start: std::sync::Mutex<HashSet<String>>,
    /// Who is called when a card's deadline escalates (each server's approvers role).
    approvals: crate::config::ApprovalsConfig,
    /// Every agent's live status, which `run_status_loop` keeps shown in its thread.
    status: status::StatusBoard,
    /// Whether the live status is shown (`discord.status_requests_per_second` above 0).
    status_on: bool,
    /// Agents being rewound: the pause that brings one to rest is said to be for its rewind.
    rewinds: rewound::Rewinds,
    /// Whether typed messages are read (Message Content), which says how to answer a question.
    message_content: MessageContent,
}

impl DiscordSurface {
    pub fn new(
        http: Arc<Http>,
        store: Store,
        approve_n_default: u32,
        clock: Arc<dyn Clock>,
    ) -> Self {
        DiscordSurface {
            http,
            store,
            questions: Mutex::new(HashMap::new()),
            withdrawn: std::sync::Mutex::new(HashMap::new()),
            approve_n_default,
            clock,
            unposted: post::Unposted::default(),
            shown_since_start: std::sync::Mutex::new(HashSet::new()),
            approvals: Default::default(),
            status: status::StatusBoard::default(),
            status_on: true,
            rewinds: rewound::Rewinds::default(),
            message_content: MessageContent::Requested,
        }
    }

    /// This surface telling people how to answer a question as the Message Content intent allows:
    /// without it, only a reply to the bot's message or a mention of the bot is read.
    pub fn with_message_content(mut self, message_content: MessageContent) -> Self {
        self.message_content = message_content;
        self
    }

    /// This surface with or without the live status message (off when
    /// `discord.status_requests_per_second` is 0).
    pub fn with_status(mut self, on: bool) -> Self {
        self.status_on = on;
        self
    }

    /// This surface with the `[approvals]` config, whose approvers roles it calls.
    pub fn with_approvals(mut self, approvals: crate::config::ApprovalsConfig) -> Self {
        self.approvals = approvals;
        self
    }

    /// Archives an agent's thread (it leaves the channel's list of active threads; a message in
    /// it, such as a follow-up's card, opens it again).
    pub async fn archive_thread(&self, thread_id: u64) {
        self.status.thread_archived(thread_id);
        let archived = ChannelId::new(thread_id)
            .edit_thread(&*self.http, serenity::all::EditThread::new().archived(true))
            .await;
        if let Err(e) = archived {
            tracing::warn!(thread = thread_id, error = %e, "the thread could not be archived");
        }
    }

    /// The image a `generate_image` step saved, as the file to attach to its result: the
    /// thread shows what was drawn, not only where it was saved.
    fn drawn_image(&self, agent: &AgentState, episode: &Episode) -> Option<(String, Vec<u8>)> {
        if episode.command.name != crate::tools::images::NAME
            || !matches!(episode.outcome, crate::core::history::Outcome::Success(_))
        {
            return None;
        }
        let prompt = episode.command.args.get("prompt")?.as_str()?;
        let path = crate::tools::images::saved_path(episode.cycle, prompt);
        let image = self.store.read_file(&agent.id, &path).ok()??;
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        Some((name, image))
    }

    /// True the first time it is asked about `agent` in this process.
    fn first_show_since_start(&self, agent: &str) -> bool {
        self.shown_since_start
            .lock_recovered()
            .insert(agent.to_string())
    }

    /// Saves which message holds the card for `cycle`. It reaches the disk with the cycle's next
    /// durable point, not a flush of its own: a crash before that loses only the reference, and
    /// the next start finds the card in the thread (`find_posted_card`).
    fn remember_card(&self, agent: &str, binding: &mut ThreadBinding, cycle: u64, message_id: u64) {
        binding.card = Some(CardRef { cycle, message_id });
        match self.store.save_binding(binding) {
            Err(e) => tracing::error!(%agent, error = %e, "cannot remember the card"),
            Ok(()) => tracing::info!(%agent, cycle, "card remembered"),
        }
    }

    /// Edits a card into its closed form: the proposal as decided, `status` under it, no buttons.
    /// It still shows the change it approved: the file is as it was shown, or the command would
    /// not run.
    async fn close_card(
        &self,
        agent: &AgentState,
        binding: &ThreadBinding,
        message_id: u64,
        proposal: &Proposal,
        status: &str,
    ) {
        let files = AgentFiles::new(&self.store, &agent.id);
        let changes = preview(&proposal.command, &files);
        let shown = ShownCard {
            agent: &agent.id,
            name: agent.name(),
            thread_id: binding.thread_id,
            message_id,
            proposal,
            changes: changes.as_ref(),
        };
        self.close_shown(shown, status).await;
    }

    /// Edits `shown` into its closed form, with `status` under it and no buttons.
    async fn close_shown(&self, shown: ShownCard<'_>, status: &str) {
        // A closed card has no deadline left.
        let closed = Proposal {
            deadline: None,
            ..shown.proposal.clone()
        };
        let text = cards::proposal_card(shown.name, &closed, shown.changes, status);
        let edit = EditMessage::new()
            .embed(to_embed(text))
            .components(Vec::new())
            .allowed_mentions(no_mentions());
        if let Err(e) = ChannelId::new(shown.thread_id)
            .edit_message(&self.http, MessageId::new(shown.message_id), edit)
            .await
        {
            let agent = shown.agent;
            tracing::warn!(%agent, cycle = closed.cycle, error = %e, "cannot close a card");
        }
    }

    /// Calls the people who may approve an expired card: the server's approvers role, or else
    /// the agent's owner and the users and roles it is shared with, mentioning exactly them.
    async fn call_approvers(&self, agent: &AgentState, binding: &ThreadBinding, text: &str) {
        // Discord takes at most 100 users and 100 roles in allowed mentions.
        const MENTIONS_MAX: usize = 100;
        let (users, roles): (Vec<u64>, Vec<u64>) =
            match self.approvals.approvers_role(binding.guild_id) {
                Some(role) => (Vec::new(), vec![role]),
                None => (
                    std::iter::once(binding.owner_id)
                        .chain(binding.shared_users.iter().copied())
                        .take(MENTIONS_MAX)
                        .collect(),
                    binding
                        .shared_roles
                        .iter()
                        .copied()
                        .take(MENTIONS_MAX)
                        .collect(),
                ),
            };
        let named: Vec<String> = roles
            .iter()
            .map(|r| format!("<@&{r}>"))
            .chain(users.iter().map(|u| format!("<@{u}>")))
            .collect();
        let allowed = CreateAllowedMentions::new()
            .roles(roles.into_iter().map(RoleId::new))
            .users(users.into_iter().map(UserId::new));
        let message = CreateMessage::new().content(cards::message_text(&format!(
            "⏰ {} {text}",
            named.join(" ")
        )));
        self.send_mentioning(&agent.id, message, post::fresh_nonce(), allowed)
            .await;
    }

    fn binding(&self, agent: &str) -> Option<ThreadBinding> {
        match self.store.binding(agent) {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(%agent, error = %e, "cannot read the thread binding");
                None
            }
        }
    }

    async fn send(&self, agent: &str, message: CreateMessage) -> Option<u64> {
        self.send_once(agent, message, post::fresh_nonce()).await
    }

    /// Posts `message` under `nonce`, retried through Discord's transient failures.
    async fn send_once(&self, agent: &str, message: CreateMessage, nonce: String) -> Option<u64> {
        self.send_mentioning(agent, message, nonce, no_mentions())
            .await
    }

    /// `send_once`, mentioning exactly `mentions`.
    async fn send_mentioning(
        &self,
        agent: &str,
        message: CreateMessage,
        nonce: String,
        mentions: CreateAllowedMentions,
    ) -> Option<u64> {
        let binding = self.binding(agent)?;
        match post::post_with_retry(
            &self.http,
            ChannelId::new(binding.thread_id),
            message,
            nonce,
            mentions,
        )
        .await
        {
            Ok(sent) => Some(sent.id.get()),
            Err(e) => {
                tracing::error!(%agent, error = %e, "cannot post to the agent's thread");
                None
            }
        }
    }

    async fn say(&self, agent: &str, text: &str) {
        self.send(
            agent,
            CreateMessage::new().content(cards::message_text(text)),
        )
        .await;
    }

    /// Posts a notice in a thread that no agent may live in any more (a deleted agent's).
    pub async fn say_in_thread(&self, thread_id: u64, text: &str) {
        let message = CreateMessage::new()
            .content(cards::message_text(text))
            .allowed_mentions(no_mentions());
        if let Err(e) = ChannelId::new(thread_id)
            .send_message(&*self.http, message)
            .await
        {
            tracing::warn!(thread = thread_id, error = %e, "a notice could not be posted");
        }
    }

    /// Hands a message typed in a thread to a waiting `ask_user`; false when nothing waits.
    pub async fn answer_question(&self, thread_id: u64, text: &str) -> bool {
        match self.questions.lock().await.remove(&thread_id) {
            Some(waiting) => waiting.send(text.to_string()).is_ok(),
            None => false,
        }
    }

    /// Posts the cards Discord did not take, for agents still waiting on the same proposal; the
    /// others are dropped from the list.
    pub async fn repost_cards(&self) {
        for (agent, cycle) in self.unposted.all() {
            let state = match self.store.load_agent(&agent) {
                Ok(Some(state)) => state,
                Ok(None) => {
                    self.unposted.forget(&agent);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(%agent, error = %e, "cannot load an agent to post its card");
                    continue;
                }
            };
            let waiting = state.progress.phase == crate::core::state::Phase::AwaitingDecision;
            match state
                .progress
                .pending
                .as_ref()
                .filter(|p| waiting && p.cycle == cycle)
            {
                Some(proposal) => {
                    tracing::info!(%agent, cycle, "posting a card Discord did not take before");
                    let files = AgentFiles::new(&self.store, &agent);
                    let changes = preview(&proposal.command, &files);
                    self.show_proposal(
                        &state,
                        proposal,
                        ShownAs::AwaitingDecision,
                        changes.as_ref(),
                    )
                    .await;
                }
                None => self.unposted.forget(&agent),
            }
        }
    }

    /// Whether the card message still exists (it may have been deleted while the bot was down).
    async fn card_exists(&self, binding: &ThreadBinding, card: &CardRef) -> bool {
        ChannelId::new(binding.thread_id)
            .message(&self.http, MessageId::new(card.message_id))
            .await
            .is_ok()
    }
}

#[async_trait]
impl Surface for DiscordSurface {
    async fn show_profile(&self, agent: &AgentState) {
        if let Some(profile) = &agent.brief.profile {
            let embed = to_embed(cards::profile_card(profile, &agent.full_task()));
            self.send(&agent.id, CreateMessage::new().embed(embed))
                .await;
        }
    }

    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        shown: ShownAs,
        preview: Option<&Preview>,
    ) {
        let auto_approved = shown == ShownAs::AutoApproved;
        let Some(mut binding) = self.binding(&agent.id) else {
            return;
        };
        let status = if auto_approved {
            if let Some(rule) = &proposal.approved_by {
                format!("Approved automatically by {rule}")
            } else if agent.brief.settings.continuous {
                "Approved automatically (continuous mode)".to_string()
            } else {
                format!(
                    "Approved automatically ({} more without asking)",
                    agent.safety.auto_approvals_left
                )
            }
        } else {
            "Waiting for a decision".to_string()
        };
        let text = cards::proposal_card(agent.name(), proposal, preview, &status);
        let first_show = self.first_show_since_start(&agent.id);
        let known = binding.card.filter(|c| c.cycle == proposal.cycle);
        let title = text.title.clone();
        let embed = to_embed(text);
        let components = if auto_approved {
            Vec::new()
        } else {
            card_buttons(&agent.id, proposal, self.approve_n_default)
        };
        // After a restart the same proposal is shown again: edit the card that is still there
        // instead of posting a second one, whether its reference was saved or not.
        let existing = match known {
            Some(card) => self
                .card_exists(&binding, &card)
                .await
                .then_some(card.message_id),
            None if first_show => self.find_posted_card(&binding, &title).await,
            None => None,
        };
        let attachments = cards::card_attachments(proposal, preview);
        if let Some(message_id) = existing {
            // The files follow the proposal as it is now (an edit may change the diff): those
            // the card had are replaced.
            let files = attachments
                .iter()
                .fold(EditAttachments::new(), |files, (name, body)| {
                    files.add(CreateAttachment::bytes(
                        body.clone().into_bytes(),
                        name.clone(),
                    ))
                });
            let edit = EditMessage::new()
                .embed(embed.clone())
                .components(components.clone())
                .attachments(files)
                .allowed_mentions(no_mentions());
            if ChannelId::new(binding.thread_id)
                .edit_message(&self.http, MessageId::new(message_id), edit)
                .await
                .is_ok()
            {
                if known.is_none() {
                    tracing::info!(agent = %agent.id, cycle = proposal.cycle, "card found in the thread after a restart");
                    self.remember_card(&agent.id, &mut binding, proposal.cycle, message_id);
                }
                return;
            }
        }
        let mut message = CreateMessage::new().embed(embed).components(components);
        // What the card had to cut is attached whole: the diff, and the arguments.
        for (name, body) in attachments {
            message = message.add_file(CreateAttachment::bytes(body.into_bytes(), name));
        }
        let nonce = post::card_nonce(&agent.id, proposal.cycle);
        let Some(message_id) = self.send_once(&agent.id, message, nonce).await else {
            // A card nobody can click would leave the agent waiting for ever: the re-post loop
            // tries again until Discord takes it.
            if !auto_approved {
                self.unposted.remember(&agent.id, proposal.cycle);
            }
            return;
        };
        self.unposted.forget(&agent.id);
        self.remember_card(&agent.id, &mut binding, proposal.cycle, message_id);
    }

    fn wants_status(&self) -> bool {
        self.status_on
    }

    fn status(&self, agent: &AgentState, status: &crate::runtime::LiveStatus) {
        self.status
            .update(&agent.id, agent.name(), status, || self.binding(&agent.id));
    }

    fn progress(&self, agent: &AgentView, text: &str) {
        self.status.progress(&agent.id, text);
    }

    fn streamed(&self, agent: &str, _piece: &str) {
        self.status.streamed(agent);
    }

    async fn thinking(&self, agent: &AgentState) {
        self.status.typed(&agent.id);
        if let Some(binding) = self.binding(&agent.id) {
            // Spawned so that a slow Discord never delays the model call; Discord shows the
            // indicator for about ten seconds or until the next message.
            let http = self.http.clone();
            tokio::spawn(async move {
                if let Err(e) = ChannelId::new(binding.thread_id)
                    .broadcast_typing(&http)
                    .await
                {
                    tracing::debug!(error = %e, "cannot show typing");
                }
            });
        }
    }

    async fn request_decision(
        &self,
        _agent: &AgentState,
        _proposal: &Proposal,
        _handle: AgentHandle,
    ) {
        // The card's buttons are the request; clicks reach the agent through the interaction router.
    }

    async fn decided(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        decision: &Decision,
        by: &ActedBy,
    ) {
        let Some(binding) = self.binding(&agent.id) else {
            return;
        };
        let Some(card) = binding.card.filter(|c| c.cycle == proposal.cycle) else {
            return;
        };
        let status = cards::decision_line(decision, &by.names(), self.clock.now());
        self.close_card(agent, &binding, card.message_id, proposal, &status)
            .await;
    }

    async fn expired(&self, agent: &AgentState, proposal: &Proposal, text: &str, escalate: bool) {
        let Some(binding) = self.binding(&agent.id) else {
            return;
        };
        if escalate {
            self.call_approvers(agent, &binding, text).await;
            return;
        }
        let Some(card) = binding.card.as_ref().filter(|c| c.cycle == proposal.cycle) else {
            return;
        };
        let status = format!("⏰ {text}");
        self.close_card(agent, &binding, card.message_id, proposal, &status)
            .await;
    }

    async fn show_result(&self, agent: &AgentState, episode: &Episode) {
        let (text, file) = cards::result_message(episode);
        let mut message = CreateMessage::new().content(text);
        if let Some(body) = file {
            message = message.add_file(CreateAttachment::bytes(
                body.into_bytes(),
                format!("cycle-{}-output.txt", episode.cycle),
            ));
        }
        if let Some((name, image)) = self.drawn_image(agent, episode) {
            message = message.add_file(CreateAttachment::bytes(image, name));
        }
        self.send(&agent.id, message).await;
    }

    async fn notify(&self, agent: &AgentState, text: &str) {
        self.say(&agent.id, &format!("ℹ️ {text}")).await;
    }

    async fn paused(&self, agent: &AgentState, reason: &PauseReason) {
        if let Some((text, buttons)) = parked::park_card(agent, reason) {
            let card = CreateMessage::new()
                .embed(to_embed(text))
                .components(buttons)
                .allowed_mentions(no_mentions());
            self.send(&agent.id, card).await;
            return;
        }
        let next = match (reason, self.rewinds.cycle_of(&agent.id)) {
            // The rewind that paused it starts it again, and its own notice says so.
            (PauseReason::ByUser { .. }, Some(cycle)) => {
                format!(" for a rewind to cycle {cycle}.")
            }
            (PauseReason::Budget { .. }, _) => {
                ". Raising the budget with `/agent budget set` resumes it.".into()
            }
            _ => ". Use `/agent resume` to continue.".into(),
        };
        let text = format!("⏸️ {} {}{next}", agent.name(), reason.describe());
        self.say(&agent.id, &text).await;
    }

    async fn finished(&self, agent: &AgentState, reason: &str) {
        let text = EmbedText {
            title: format!("{} finished", agent.name()),
            description: reason.to_string(),
            fields: vec![
                (
                    "Steps".into(),
                    format!(
                        "{} cycles · {} model calls · {} prompt + {} completion tokens",
                        agent.step_count(),
                        agent.money.usage.calls,
                        agent.money.usage.prompt_tokens,
                        agent.money.usage.completion_tokens
                    ),
                ),
                (
                    "Spent".into(),
                    format!(
                        "{} (the agent and its sub-agents)",
                        crate::core::budget::format_usd(
                            agent.money.spent_at_last_cycle.unwrap_or_default()
                        )
                    ),
                ),
            ],
            footer: "Give it a follow-up task with /agent resume".into(),
        }
        .fitted();
        self.send(&agent.id, CreateMessage::new().embed(to_embed(text)))
            .await;
        // `/agent archive` asked for the thread to close after this last word.
        if self.store.take_archive_mark(&agent.id).unwrap_or(false) {
            if let Some(binding) = self.binding(&agent.id) {
                self.archive_thread(binding.thread_id).await;
            }
        }
    }

    async fn ask_user(&self, agent: &AgentView, question: &str) -> Result<String, NoAnswer> {
        let binding = self.binding(&agent.id).ok_or(NoAnswer::NoThread)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut questions = self.questions.lock().await;
            let withdrawn = self.withdrawn.lock_recovered().remove(&binding.thread_id);
            if withdrawn == Some(agent.cycle) {
                return Err(NoAnswer::Withdrawn);
            }
            questions.insert(binding.thread_id, tx);
        }
        let how = match self.message_content {
            MessageContent::Requested => "Answer with a message in this thread.",
            MessageContent::NotRequested => {
                "Answer by replying to this message (or in a message that @mentions me)."
            }
        };
        let text = format!("❓ **{}** asks: {question}\n{how}", agent.name);
        self.say(&agent.id, &cards::message_text(&text)).await;
        match tokio::time::timeout(ASK_USER_TIMEOUT, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(NoAnswer::Withdrawn),
            Err(_) => {
                self.questions.lock().await.remove(&binding.thread_id);
                Err(NoAnswer::TimedOut)
            }
        }
    }

    async fn withdraw_question(&self, agent: &AgentView) {
        if let Some(binding) = self.binding(&agent.id) {
            // Dropping the waiting sender ends the wait: "the question was withdrawn". A
            // question not asked yet is withdrawn before it is.
            let mut questions = self.questions.lock().await;
            if questions.remove(&binding.thread_id).is_none() {
                self.withdrawn
                    .lock_recovered()
                    .insert(binding.thread_id, agent.cycle);
            }
        }
    }
}
