//! Approve & remember on `Stepper`: which rules a card may offer, which rule approves a proposal
//! without a card (and counting its use), keeping a rule a person made, and revoking one.
//!
//! `rule_scopes` is what a card may offer (see `rules` for when). `rule_for` finds a live rule: the
//! agent's own from its state, the server's from `StepCtx::server_rules`. `keep_rule` lets the
//! approval stand but keeps no rule the card no longer offers under the policy in force, none over
//! the limit (`over_limit`, shared with Discord's pre-check) and no server rule outside a server,
//! telling the thread why; a rule with the same id replaces the older one. `on_revoke_rule` handles
//! `Event::RevokeRule`.

use super::*;
use crate::commands::Risk;
use crate::rules::{
    covering_rule, offered_scopes, over_limit, ApprovalRule, RuleBreadth, RuleDraft, RuleReach,
    RuleScope,
};

impl Stepper<'_, '_> {
    /// How wide a rule may stand in for a person's click on `call`, if at all: any scope where
    /// the policy lets its class run unattended anyway, the exact command where the class asks
    /// but lets people remember (`ClassAction::Remember`); never where the class needs several
    /// approvers or data would leave a tainted agent.
    fn rule_breadth(&self, call: &CommandCall, risk: Risk, sends_out: bool) -> Option<RuleBreadth> {
        if self.ctx.quorum.needed(risk) > 1 || sends_out {
            return None;
        }
        match self
            .ctx
            .policy
            .action_for(&self.state.brief.settings.policy, &call.name, risk)
        {
            ClassAction::Auto => Some(RuleBreadth::Any),
            ClassAction::Remember => Some(RuleBreadth::ExactOnly),
            ClassAction::Ask | ClassAction::Deny => None,
        }
    }

    /// The scopes a card for `call` may offer to remember (none where no rule may approve it).
    pub(super) fn rule_scopes(
        &self,
        call: &CommandCall,
        risk: Risk,
        sends_out: bool,
    ) -> Vec<RuleScope> {
        let Some(breadth) = self.rule_breadth(call, risk, sends_out) else {
            return Vec::new();
        };
        self.ctx
            .commands
            .get(&call.name)
            .map(|spec| offered_scopes(spec, call, breadth))
            .unwrap_or_default()
    }

    /// The live rule, the agent's own or its server's, that approves `call`.
    pub(super) fn rule_for(
        &self,
        call: &CommandCall,
        risk: Risk,
        sends_out: bool,
    ) -> Option<ApprovalRule> {
        let breadth = self.rule_breadth(call, risk, sends_out)?;
        // A class that asks is covered by exact rules only, whatever rules were made while it
        // ran unattended; and a script's rule only once it knows the contents it binds.
        let rules = self
            .state
            .safety
            .rules
            .iter()
            .chain(self.ctx.server_rules)
            .filter(|rule| breadth == RuleBreadth::Any || rule.scope.is_exact())
            .filter(|rule| {
                !matches!(rule.scope, RuleScope::ExactScript { .. })
                    || rule.scope.bound_script().is_some()
            });
        covering_rule(rules, call, self.ctx.now).cloned()
    }

    /// Counts a use of `rule`: in the agent's state for its own, through the store for its
    /// server's (the trail records each use either way).
    pub(super) fn note_rule_use(&mut self, rule: &ApprovalRule) {
        let now = self.ctx.now;
        match rule.reach {
            RuleReach::Agent => {
                if let Some(own) = self.state.safety.rules.iter_mut().find(|r| r.id == rule.id) {
                    own.uses += 1;
                    own.last_used = Some(now);
                }
            }
            RuleReach::Server => self.fx.push(Effect::ServerRuleUsed {
                id: rule.id.clone(),
            }),
        }
    }

    /// Keeps the rule a person asked for with their approval of `cycle`. The approval stands
    /// whatever happens here; a rule that no longer fits the card, or one over the limit, is not
    /// kept and the thread is told why.
    pub(super) fn keep_rule(&mut self, cycle: u64, draft: RuleDraft, by: &Person) {
        let now = self.ctx.now;
        // Worked out again now: the policy may have become stricter since the card was shown.
        let offered = self.state.progress.pending.as_ref().is_some_and(|p| {
            p.stuck.is_none()
                && self
                    .rule_scopes(&p.command, p.risk, p.outgoing.is_some())
                    .contains(&draft.scope.as_offered())
        });
        let full = over_limit(
            draft.reach,
            &self.state.safety.rules,
            self.ctx.server_rules,
            now,
        );
        let unbound_script = matches!(draft.scope, RuleScope::ExactScript { .. })
            && draft.scope.bound_script().is_none();
        let problem = if !offered {
            Some("the card no longer offers that rule (the command or the policy changed)".into())
        } else if unbound_script {
            Some("the script it runs could not be read".into())
        } else if draft.reach == RuleReach::Server && self.state.money.spender.guild.is_none() {
            Some("rules for every agent need a server".into())
        } else {
            full
        };
        if let Some(problem) = problem {
            self.fx.push(Effect::Notify(format!(
                "Cycle {cycle}: approved, but no rule was kept: {problem}."
            )));
            return;
        }
        let rule = ApprovalRule::from_draft(&self.state.id, cycle, draft, by, now);
        self.audit(by, rule.created_event());
        match rule.reach {
            RuleReach::Agent => {
                // A card shown again at the same cycle (after a restart) makes the same id: the
                // newer rule replaces the older one.
                self.state
                    .safety
                    .rules
                    .retain(|r| r.live(now) && r.id != rule.id);
                self.state.safety.rules.push(rule);
            }
            RuleReach::Server => self.fx.push(Effect::SaveServerRule(rule)),
        }
    }

    /// Revokes the agent's own rule `id`.
    pub(super) fn on_revoke_rule(&mut self, id: String, by: Person) {
        let Some(at) = self.state.safety.rules.iter().position(|r| r.id == id) else {
            self.fx.push(Effect::Rejected(format!(
                "This agent has no rule {id}; it may have been revoked already."
            )));
            return;
        };
        let rule = self.state.safety.rules.remove(at);
        self.audit(by, rule.revoked_event());
    }
}
