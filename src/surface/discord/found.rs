//! Finding what an earlier run posted in a thread but could not record: a card among the
//! thread's newest messages, the live status among its pins.

use serenity::all::{ChannelId, GetMessages, Message};

use super::{DiscordSurface, RECENT_MESSAGES_SEARCHED};
use crate::store::ThreadBinding;

impl DiscordSurface {
    /// A card titled `title` that the bot already posted among the thread's newest messages: an
    /// earlier run's post that Discord stored but whose reference died with that run. Discord's
    /// enforced nonce covers a restart within its few minutes; this covers a longer outage.
    pub(super) async fn find_posted_card(
        &self,
        binding: &ThreadBinding,
        title: &str,
    ) -> Option<u64> {
        self.find_posted(binding, |found| found == title).await
    }

    /// The newest message the bot posted among the thread's newest whose embed's title `wanted`.
    pub(super) async fn find_posted(
        &self,
        binding: &ThreadBinding,
        wanted: impl Fn(&str) -> bool,
    ) -> Option<u64> {
        let recent = ChannelId::new(binding.thread_id)
            .messages(
                &self.http,
                GetMessages::new().limit(RECENT_MESSAGES_SEARCHED),
            )
            .await;
        match recent {
            Ok(messages) => newest_posted_by_bot(&messages, wanted),
            Err(e) => {
                tracing::warn!(thread = binding.thread_id, error = %e, "cannot search the thread for an earlier card");
                None
            }
        }
    }

    /// The newest message the bot pinned in the thread whose embed's title `wanted`, however many
    /// messages came after it.
    pub(super) async fn find_pinned(
        &self,
        binding: &ThreadBinding,
        wanted: impl Fn(&str) -> bool,
    ) -> Option<u64> {
        match ChannelId::new(binding.thread_id).pins(&self.http).await {
            Ok(pinned) => newest_posted_by_bot(&pinned, wanted),
            Err(e) => {
                tracing::warn!(thread = binding.thread_id, error = %e, "cannot read the thread's pinned messages");
                None
            }
        }
    }
}

/// The first of `messages` (Discord lists the newest first) that the bot posted with an embed
/// whose title `wanted`.
fn newest_posted_by_bot(messages: &[Message], wanted: impl Fn(&str) -> bool) -> Option<u64> {
    messages
        .iter()
        .find(|m| {
            m.author.bot
                && m.embeds
                    .first()
                    .and_then(|e| e.title.as_deref())
                    .is_some_and(&wanted)
        })
        .map(|m| m.id.get())
}
