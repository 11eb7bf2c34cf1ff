//! Model calls with spend control: `MeteredCall` paces, reserves, calls, then settles or releases;
//! `Actor::call_model` starts the agent's own, each in a task; `AgentModel` is the agent's model as
//! commands use it (`ToolModel`, under `TOOL_PURPOSE`), metered the same way.
//!
//! A call to an unpriced model is refused. Its reply reserve is fitted to what the budgets have
//! left (`Price::fit_reply`). It is paced on the clock seam (a reservation made ahead is given back
//! before a wait, and the actor hears `Event::Paced`), then reserved through the ledger
//! (`Budgets::reserve_durably`), or it takes the reservation made ahead when that covers its worst
//! case (one that does not is given back first). The call is settled or released by
//! `Budgets::close_call`, and its answer comes back as `Event::ModelReplied`, `ModelFailed` or
//! `CallRefused`. A cycle's reply (think, re-ask, rethink) is streamed when `llm.stream` says so
//! (`StreamMode`: `auto` streams when the surface `watches_stream`, which only the console on a
//! terminal does; `always`; `never`), its pieces going to `Surface::streamed`.

use crate::budget::ledger::Reservation;
use crate::budget::{Budgets, FailedCharge, Metered, Payer};
use crate::core::budget::{Micros, Pacing};
use crate::core::event::{CallPurpose, Event, ModelCall};
use crate::core::message::Message;
use crate::core::usage::Usage;
use crate::llm::retry::RetryPolicy;
use crate::llm::{prompt_cache_key, Billing, ChatRequest, LlmError};
use crate::locks::LockRecovered;

use super::memory_calls::ThinkAhead;
use super::{Actor, ActorMsg, AgentHandle, Deps};

/// One model call with its spend control: paced by the rate limits, its worst case reserved in
/// the ledger (durably) before it is made, settled with the reported usage after. A failure
/// that certainly was not billed (a refused connection, a 429) is retried inside `complete`,
/// under the same reservation, and released if it stays a failure, so a 429 storm is charged
/// once; one that may have been billed (a timeout once sent, a 5xx, a reply cut short) is charged
/// and tried again here, each time under a reservation of its own.
pub(super) struct MeteredCall {
    pub(super) payer: Payer,
    pub(super) prompt_tokens: u64,
    /// `Err` for a model nobody priced: the call is refused, never made for free.
    pub(super) price: Result<crate::core::budget::Price, crate::config::Unpriced>,
    pub(super) request: ChatRequest,
    /// A reservation made for this call before it was built, durable already (a cycle's call is
    /// reserved by the step that leads to it, in that step's flush). Used when it covers the
    /// call's worst case; otherwise given back and the call reserves for itself.
    pub(super) reserved_ahead: Option<Reservation>,
}

/// What came of a metered call.
pub(super) enum CallOutcome {
    Replied {
        text: String,
        usage: crate::core::usage::Usage,
        cost: Micros,
    },
    /// No budget can pay for the call's worst case.
    Refused(String),
    Failed(String),
}

/// Where a streamed reply's pieces go as they arrive.
type TextSink<'a> = dyn for<'s> Fn(&'s str) + Send + Sync + 'a;

use crate::config::StreamMode;

impl MeteredCall {
    /// The agent's own call (a cycle, a summary…), answered as an event for its actor.
    pub(super) async fn run_for_actor(
        self,
        deps: &Deps,
        handle: &AgentHandle,
        seq: u64,
        purpose: CallPurpose,
    ) -> Event {
        let on_wait = |pacing: Pacing| {
            handle.note(Event::Paced {
                seq,
                purpose,
                pacing,
            })
        };
        let what = format!("{} {:?}", self.request.model, purpose);
        // A cycle's reply is streamed to the surface as it comes (the console prints it,
        // Discord's live status counts it); summaries and critiques are not shown as they come.
        let agent = self.payer.agent.clone();
        let on_text = |piece: &str| deps.surface.streamed(&agent, piece);
        let streams = match deps.config.llm.stream {
            StreamMode::Always => true,
            StreamMode::Never => false,
            StreamMode::Auto => deps.surface.watches_stream(),
        } && matches!(
            purpose,
            CallPurpose::Think | CallPurpose::Reask | CallPurpose::Rethink
        );
        let on_text: Option<&TextSink<'_>> = streams.then_some(&on_text);
        match self.run(deps, &what, &on_wait, on_text).await {
            CallOutcome::Replied { text, usage, .. } => {
                tracing::debug!(?purpose, content = %text, "model reply");
                Event::ModelReplied {
                    seq,
                    purpose,
                    text,
                    usage: Some(usage),
                }
            }
            CallOutcome::Refused(reason) => Event::CallRefused {
                seq,
                purpose,
                reason,
            },
            CallOutcome::Failed(error) => Event::ModelFailed {
                seq,
                purpose,
                error,
            },
        }
    }

    pub(super) async fn run(
        mut self,
        deps: &Deps,
        what: &str,
        on_wait: &(dyn Fn(Pacing) + Sync),
        on_text: Option<&TextSink<'_>>,
    ) -> CallOutcome {
        let mut ahead = self.reserved_ahead.take();
        let mut worst;
        let price = match &self.price {
            Ok(price) => *price,
            Err(unpriced) => {
                metrics::counter!(crate::ops::names::BUDGET_REFUSALS, "kind" => "unpriced")
                    .increment(1);
                self.give_back(deps, ahead);
                return CallOutcome::Refused(unpriced.to_string());
            }
        };
        let held = ahead.as_ref().map_or(Micros::ZERO, |r| r.amount);
        if let Err(e) = self.fit_to_budget(deps, price, held) {
            self.give_back(deps, ahead);
            return CallOutcome::Failed(format!("the spend ledger is unavailable: {e}"));
        }
        worst = price.cost(self.prompt_tokens, self.request.max_tokens as u64);
        if let Some(short) = ahead.as_ref().filter(|r| r.amount < worst) {
            tracing::debug!(agent = %self.payer.agent, reserved = short.amount.0, worst = worst.0,
                "the call outgrew its reservation made ahead; it reserves for itself");
            self.give_back(deps, ahead.take());
        }
        self.wait_for_pacer(deps, worst, on_wait, &mut ahead).await;
        let llm = &deps.config.llm;
        let policy = RetryPolicy {
            max_attempts: llm.max_attempts,
            initial: std::time::Duration::from_millis(llm.retry_initial_ms),
            max: std::time::Duration::from_millis(llm.retry_max_ms),
        };
        let started = std::time::Instant::now();
        let cost_of = |(_, usage): &(String, Usage)| price.cost_of(*usage);
        // Requests made before the one at hand, the transport's own retries included.
        let mut earlier = 0;
        let mut tries = 1;
        let paid = loop {
            let reservation = match ahead.take() {
                Some(reservation) => reservation,
                None => match deps
                    .budgets
                    .reserve_durably(&self.payer, worst, what, deps.clock.now())
                    .await
                {
                    Ok(reservation) => reservation,
                    Err(refused) => break Err(refused),
                },
            };
            let streamed = std::sync::Mutex::new(String::new());
            let result = self.attempt(deps, on_text, &streamed).await;
            let streamed = streamed.into_inner().unwrap_or_else(|p| p.into_inner());
            let failed = |error: &LlmError| self.failed_charge(deps, price, error, &streamed);
            match deps
                .budgets
                .close_call(&self.payer, &reservation, result, cost_of, failed)
            {
                // A failure that may have been billed is tried again only under a reservation
                // of its own, which the next turn makes (or the budget refuses), and only while
                // nothing of it was shown: a reply streamed twice would read as two.
                Err(Metered::Call(error))
                    if error.billing() == Billing::MayBeBilled
                        && streamed.is_empty()
                        && tries < policy.max_attempts =>
                {
                    earlier += attempts_of(&error);
                    tracing::warn!(what, %error, tries, "a paid model call failed after it may have been billed; it is charged and tried again under a new reservation");
                    metrics::counter!(crate::ops::names::RETRIES, "status" => "billed")
                        .increment(1);
                    deps.clock
                        .sleep(policy.delay(tries, rand::random::<f64>()))
                        .await;
                    tries += 1;
                    if let Err(e) = self.fit_to_budget(deps, price, Micros::ZERO) {
                        return CallOutcome::Failed(format!(
                            "the spend ledger is unavailable: {e}"
                        ));
                    }
                    worst = price.cost(self.prompt_tokens, self.request.max_tokens as u64);
                    self.wait_for_pacer(deps, worst, on_wait, &mut None).await;
                }
                Err(Metered::Call(error)) => {
                    break Err(Metered::Call(error.after_attempts(earlier)))
                }
                other => break other,
            }
        };
        record_call(
            &self.request.model,
            self.request.purpose,
            started.elapsed(),
            &paid,
            deps.clock.now(),
        );
        match paid {
            Ok(((text, usage), cost)) => CallOutcome::Replied { text, usage, cost },
            Err(Metered::Refused(reason)) => CallOutcome::Refused(reason),
            Err(Metered::Ledger(e)) => {
                CallOutcome::Failed(format!("the spend ledger is unavailable: {e}"))
            }
            Err(Metered::Call(error)) => {
                tracing::warn!(what, %error, "model call failed");
                CallOutcome::Failed(error.to_string())
            }
        }
    }

    /// One request to the model. The text a streamed reply has shown so far is kept in
    /// `streamed`, so that a reply that breaks off is charged what it used.
    async fn attempt(
        &self,
        deps: &Deps,
        on_text: Option<&TextSink<'_>>,
        streamed: &std::sync::Mutex<String>,
    ) -> Result<(String, Usage), LlmError> {
        let request = self.request.clone();
        let reply = match on_text {
            Some(on_text) => {
                let kept = |piece: &str| {
                    streamed.lock_recovered().push_str(piece);
                    on_text(piece);
                };
                deps.model.complete_streaming(request, &kept).await?
            }
            None => deps.model.complete(request).await?,
        };
        // A server that reports no usage is billed by our own count of what was exchanged.
        let usage = reply.usage.unwrap_or_else(|| Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: deps.counter.count(&reply.content) as u64,
            cached_prompt_tokens: 0,
            cache_write_tokens: 0,
        });
        Ok((reply.content, usage))
    }

    /// What a failed request is charged: what a reply that broke off used so far (its prompt and
    /// the text it streamed), else its reservation when the provider may have billed it.
    fn failed_charge(
        &self,
        deps: &Deps,
        price: crate::core::budget::Price,
        error: &LlmError,
        streamed: &str,
    ) -> FailedCharge {
        if !streamed.is_empty() {
            let completion = deps.counter.count(streamed) as u64;
            return FailedCharge::Used(price.cost(self.prompt_tokens, completion));
        }
        match error.billing() {
            Billing::NotBilled => FailedCharge::Nothing,
            Billing::MayBeBilled => FailedCharge::Reservation,
        }
    }

    /// Lowers the reply reserve when what the budgets have left cannot cover the whole of it,
    /// down to the model's floor, so a small budget's last calls still go out. Below the floor
    /// the request stays as it is and the ledger refuses it with its reason. The ledger's
    /// reservation, made after, is what keeps the cap: another call may reserve in between.
    /// `held`: what a reservation made ahead for this very call holds, which is this call's to use.
    fn fit_to_budget(
        &mut self,
        deps: &Deps,
        price: crate::core::budget::Price,
        held: Micros,
    ) -> Result<(), crate::store::StoreError> {
        use crate::core::budget::ReplyFit;
        let available = deps
            .budgets
            .available(&self.payer, deps.clock.now())?
            .saturating_add(held);
        let model = &self.request.model;
        let floor = deps.config.llm.reply_floor(model);
        let wanted = self.request.max_tokens;
        if let ReplyFit::Lowered(fits) =
            price.fit_reply(self.prompt_tokens, wanted, floor, available)
        {
            tracing::info!(agent = %self.payer.agent, model = %model, wanted, fits,
                "the budget left covers a shorter reply only; the call goes out with fewer reply tokens");
            self.request.max_tokens = fits;
        }
        Ok(())
    }

    /// Passes the rate-limit gates one by one, waiting (on the clock seam) at a closed one. A
    /// reservation made ahead is given back before a wait, so that it holds no one's budget while
    /// the call is paced; the call then reserves for itself.
    async fn wait_for_pacer(
        &self,
        deps: &Deps,
        worst: Micros,
        on_wait: &(dyn Fn(Pacing) + Sync),
        ahead: &mut Option<Reservation>,
    ) {
        let pacer = deps.budgets.pacer();
        let request = Budgets::pace_request(&self.payer.spender, worst);
        for gate in 0..pacer.gates() {
            while let Err(wait) = pacer.try_gate(gate, &request) {
                self.give_back(deps, ahead.take());
                let until = deps.clock.now()
                    + chrono::Duration::from_std(wait.after).unwrap_or(chrono::Duration::MAX);
                on_wait(Pacing {
                    until,
                    why: wait.why,
                });
                deps.clock.sleep(wait.after).await;
            }
        }
        pacer.retain_recent();
    }

    fn give_back(&self, deps: &Deps, reservation: Option<Reservation>) {
        if let Some(reservation) = reservation {
            deps.budgets.release_call(&self.payer, &reservation);
        }
    }
}

impl Actor {
    /// Starts one of the agent's own model calls in a task, metered; its answer comes back as an
    /// event. A cycle's call takes the reservation made ahead for it.
    pub(super) fn call_model(&mut self, call: ModelCall) {
        if let CallPurpose::Summary { cycle } = call.purpose {
            if !self.summaries_in_flight.insert(cycle) {
                return;
            }
        }
        let llm = &self.deps.config.llm;
        let model_name = match (call.smart, llm.smart_model()) {
            (true, Some(smart)) => smart.to_string(),
            _ => self.state.brief.settings.model.clone(),
        };
        let prompt_tokens = (self.deps.counter.count_messages(&call.messages)
            + call.json_schema.as_ref().map_or(0, |schema| {
                // Structured-output schemas are read by the model too, and billed as input.
                self.deps.counter.count(&schema.to_string())
            })) as u64;
        let reserved_ahead = if call.purpose == CallPurpose::Think {
            self.last_think_prompt_tokens = Some(prompt_tokens);
            self.think_ahead
                .take()
                .and_then(ThinkAhead::into_reservation)
        } else {
            None
        };
        let payer = self.deps.budgets.payer(&self.state);
        let metered = MeteredCall {
            prompt_tokens,
            reserved_ahead,
            price: self.deps.budgets.price(&model_name),
            request: ChatRequest {
                purpose: call.purpose.marker(),
                max_tokens: llm.reply_tokens(&model_name, call.max_tokens),
                model: model_name,
                messages: call.messages,
                json_schema: call.json_schema,
                cache_key: Some(prompt_cache_key(&payer.agent)),
            },
            payer,
        };
        let deps = self.deps.clone();
        let handle = self.handle.clone();
        self.tasks.spawn(async move {
            let event = metered
                .run_for_actor(&deps, &handle, call.seq, call.purpose)
                .await;
            handle.report(ActorMsg::Event { event, reply: None }).await;
        });
    }
}

/// The model as a command uses it (reading a page, a sub-agent's reply): the agent's model,
/// metered and charged to the agent exactly like its own calls.
pub(super) struct AgentModel<'a> {
    pub(super) deps: &'a Deps,
    pub(super) model: String,
    pub(super) payer: Payer,
}

impl AgentModel<'_> {
    fn metered(&self, messages: Vec<Message>, max_tokens: u32) -> MeteredCall {
        let model = self.model.clone();
        MeteredCall {
            payer: self.payer.clone(),
            prompt_tokens: self.deps.counter.count_messages(&messages) as u64,
            price: self.deps.budgets.price(&model),
            request: ChatRequest {
                purpose: crate::llm::TOOL_PURPOSE,
                max_tokens: self.deps.config.llm.reply_tokens(&model, max_tokens),
                model,
                messages,
                json_schema: None,
                cache_key: Some(prompt_cache_key(&self.payer.agent)),
            },
            reserved_ahead: None,
        }
    }
}

#[async_trait::async_trait]
impl crate::tools::ToolModel for AgentModel<'_> {
    async fn complete(
        &self,
        what: &str,
        messages: Vec<Message>,
        max_tokens: u32,
    ) -> Result<crate::tools::ToolReply, crate::tools::ToolModelError> {
        let call = self.metered(messages, max_tokens);
        let what = format!("{} {what}", call.request.model);
        match call.run(self.deps, &what, &|_| {}, None).await {
            CallOutcome::Replied { text, cost, .. } => Ok(crate::tools::ToolReply { text, cost }),
            CallOutcome::Refused(reason) => Err(crate::tools::ToolModelError::Refused(reason)),
            CallOutcome::Failed(error) => Err(crate::tools::ToolModelError::Failed(error)),
        }
    }

    fn count(&self, messages: &[Message]) -> usize {
        self.deps.counter.count_messages(messages)
    }

    fn context_tokens(&self) -> u32 {
        self.deps.config.llm.model_spec(&self.model).context_tokens
    }
}

type Paid = Result<((String, Usage), Micros), Metered<LlmError>>;

/// How many requests a failure took, the transport's retries included.
fn attempts_of(error: &LlmError) -> u32 {
    match error {
        LlmError::Unavailable { attempts, .. } => *attempts,
        _ => 1,
    }
}

/// The call's metrics (calls, latency, tokens, dollars, refusals) and what readiness learns from it.
fn record_call(
    model: &str,
    purpose: &'static str,
    took: std::time::Duration,
    paid: &Paid,
    now: chrono::DateTime<chrono::Utc>,
) {
    use crate::ops::names;
    let model = model.to_string();
    let outcome = match paid {
        Ok(((_, usage), cost)) => {
            crate::ops::health().model_answered(now);
            metrics::counter!(names::TOKENS, "model" => model.clone(), "kind" => "prompt")
                .increment(usage.prompt_tokens);
            metrics::counter!(names::TOKENS, "model" => model.clone(), "kind" => "completion")
                .increment(usage.completion_tokens);
            metrics::counter!(names::SPEND_MICRODOLLARS, "model" => model.clone())
                .increment(cost.0);
            "replied"
        }
        Err(Metered::Refused(_)) => {
            metrics::counter!(names::BUDGET_REFUSALS, "kind" => "chat").increment(1);
            "refused"
        }
        Err(Metered::Call(error)) => {
            crate::ops::health().model_failed(now, &error.to_string());
            "failed"
        }
        Err(Metered::Ledger(_)) => "failed",
    };
    if outcome != "refused" {
        metrics::histogram!(names::MODEL_CALL_SECONDS, "model" => model.clone())
            .record(took.as_secs_f64());
    }
    metrics::counter!(names::MODEL_CALLS, "model" => model, "purpose" => purpose, "outcome" => outcome)
        .increment(1);
}
