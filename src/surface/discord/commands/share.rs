//! `/agent share` and `/agent unshare`: who besides the owner may decide for the agent.

use poise::serenity_prelude::{RoleId, UserId};

use super::{thread_agent, Ctx, Error};
use crate::service::rights::may_share;
use crate::service::UserError;
use crate::surface::discord::respond::{author, reply_privately};

async fn change_share(
    ctx: Ctx<'_>,
    user: Option<UserId>,
    role: Option<RoleId>,
    add: bool,
) -> Result<(), Error> {
    let (mut binding, _) = thread_agent(ctx).await?;
    if !may_share(&binding, &author(ctx)) {
        return Err(UserError::new("Only the agent's owner and members who can manage threads can change who it is shared with.").into());
    }
    if user.is_none() && role.is_none() {
        return Err(UserError::new("Name a user or a role.").into());
    }
    fn apply(list: &mut Vec<u64>, id: Option<u64>, add: bool) {
        if let Some(id) = id {
            list.retain(|x| *x != id);
            if add {
                list.push(id);
            }
        }
    }
    apply(&mut binding.shared_users, user.map(|u| u.get()), add);
    apply(&mut binding.shared_roles, role.map(|r| r.get()), add);
    ctx.data().app.store.save_binding(&binding)?;
    let who = [
        user.map(|u| format!("<@{}>", u.get())),
        role.map(|r| format!("<@&{}>", r.get())),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" and ");
    let verb = if add {
        "now shared with"
    } else {
        "no longer shared with"
    };
    reply_privately(ctx, format!("The agent is {verb} {who}.")).await
}

/// Let a user or a role approve, give feedback and stop this agent.
#[poise::command(slash_command, guild_only)]
pub(super) async fn share(
    ctx: Ctx<'_>,
    #[description = "User"] user: Option<UserId>,
    #[description = "Role"] role: Option<RoleId>,
) -> Result<(), Error> {
    change_share(ctx, user, role, true).await
}

/// Take back a share.
#[poise::command(slash_command, guild_only)]
pub(super) async fn unshare(
    ctx: Ctx<'_>,
    #[description = "User"] user: Option<UserId>,
    #[description = "Role"] role: Option<RoleId>,
) -> Result<(), Error> {
    change_share(ctx, user, role, false).await
}
