//! `generate_image`: one image from the configured images model, its price reserved against the
//! agent's budgets before the call, saved in the workspace under `images/`.
//!
//! The size is checked against those offered and against the workspace's room before anything is
//! paid; the price is reserved (`Budgets::reserve_durably`), the call made and settled
//! (`Budgets::close_call`); the image is put in `images/<cycle>-<slug>.png` with the step.

use std::sync::Arc;

use async_trait::async_trait;

use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::budget::{Budgets, Metered};
use crate::core::budget::{format_usd, usd_to_micros};
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::reply::CommandCall;
use crate::llm::images::ImageModel;
use crate::store::WorkspaceOp;

pub const NAME: &str = "generate_image";

/// Characters of the prompt kept in the file's name.
const NAME_CHARS: usize = 40;

pub struct GenerateImage {
    model: Arc<dyn ImageModel>,
    budgets: Arc<Budgets>,
    /// The sizes offered with their prices in dollars, the default first.
    sizes: Vec<(String, f64)>,
    max_bytes: u64,
}

impl GenerateImage {
    pub fn new(
        model: Arc<dyn ImageModel>,
        budgets: Arc<Budgets>,
        config: &crate::config::ImagesConfig,
    ) -> Self {
        GenerateImage {
            model,
            budgets,
            sizes: config.sizes(),
            max_bytes: config.max_bytes,
        }
    }
}

#[async_trait]
impl Command for GenerateImage {
    fn spec(&self) -> CommandSpec {
        let sizes: Vec<&str> = self.sizes.iter().map(|(s, _)| s.as_str()).collect();
        CommandSpec::new(
            NAME,
            &format!(
                "Generate an image from a description and save it in the workspace's images folder; sizes {} (default {})",
                sizes.join(", "),
                sizes.first().copied().unwrap_or_default()
            ),
            Risk::Write,
        )
        .arg("prompt", ArgType::String, "What the image shows")
        .optional_arg("size", ArgType::String, "One of the sizes offered")
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let prompt = str_arg(call, "prompt").trim();
        if prompt.is_empty() {
            return ToolOutput::error("The prompt is empty: describe the image.");
        }
        let size = call
            .args
            .get("size")
            .and_then(|v| v.as_str())
            .map(str::trim)
            .unwrap_or_else(|| self.sizes.first().map_or("", |(s, _)| s.as_str()));
        let Some((size, usd)) = self.sizes.iter().find(|(s, _)| s == size) else {
            let offered: Vec<&str> = self.sizes.iter().map(|(s, _)| s.as_str()).collect();
            return ToolOutput::error(format!(
                "Size '{size}' is not offered; use one of: {}.",
                offered.join(", ")
            ));
        };
        // Room is checked before paying: an image the workspace cannot keep is not made.
        let used: u64 = match ctx.workspace.list() {
            Ok(files) => files.iter().map(|(_, bytes)| bytes).sum(),
            Err(e) => return ToolOutput::error(format!("The workspace could not be read: {e}")),
        };
        if used + self.max_bytes > ctx.limits.max_agent_bytes {
            return ToolOutput::error(format!(
                "The workspace holds {used} bytes of {}; an image needs up to {} more. Delete files you no longer need.",
                ctx.limits.max_agent_bytes, self.max_bytes
            ));
        }
        let price = usd_to_micros(*usd);
        let what = format!("{} image {size}", self.model.model());
        let made = match self
            .budgets
            .reserve_durably(ctx.payer, price, &what, ctx.now)
            .await
        {
            Ok(reservation) => {
                let generated = self.model.generate(prompt, size, self.max_bytes).await;
                self.budgets.close_call(
                    ctx.payer,
                    &reservation,
                    generated,
                    |_| price,
                    // An image's price is its worst case: a failure that may have been billed
                    // is charged it.
                    |e: &crate::llm::LlmError| match e.billing() {
                        crate::llm::Billing::NotBilled => crate::budget::FailedCharge::Nothing,
                        crate::llm::Billing::MayBeBilled => {
                            crate::budget::FailedCharge::Reservation
                        }
                    },
                )
            }
            Err(refused) => Err(refused),
        };
        let (image, cost) = match made {
            Ok(made) => made,
            Err(Metered::Refused(why)) => {
                return ToolOutput::error(format!("No budget for an image: {why}"))
            }
            Err(Metered::Ledger(e)) => {
                return ToolOutput::error(format!("The budget ledger failed: {e}"))
            }
            Err(Metered::Call(e)) => {
                return ToolOutput::error(format!("The image was not generated: {e}"))
            }
        };
        let path = saved_path(ctx.agent.cycle, prompt);
        let revised = image
            .revised_prompt
            .map(|r| format!(" The model drew: {r}"))
            .unwrap_or_default();
        ToolOutput {
            ops: vec![WorkspaceOp::Put {
                path: path.clone(),
                contents: image.bytes.clone(),
            }],
            ..ToolOutput::success(format!(
                "Saved a {size} image as {path} ({} bytes, {}).{revised}",
                image.bytes.len(),
                format_usd(cost)
            ))
        }
    }
}

/// Where the image drawn at `cycle` for `prompt` is saved in the workspace (the thread attaches
/// it from there).
pub fn saved_path(cycle: u64, prompt: &str) -> String {
    format!(
        "images/{cycle}-{}.png",
        slug(prompt).unwrap_or_else(|| "image".into())
    )
}

/// The prompt's first words as a file name: lowercase letters and digits joined by dashes.
fn slug(prompt: &str) -> Option<String> {
    let words: Vec<String> = prompt
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut slug = String::new();
    for word in words {
        if slug.len() + word.len() + 1 > NAME_CHARS {
            break;
        }
        if !slug.is_empty() {
            slug.push('-');
        }
        slug.push_str(&word);
    }
    (!slug.is_empty()).then_some(slug)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_come_from_the_prompt() {
        assert_eq!(
            slug("A red fox, in snow!").as_deref(),
            Some("a-red-fox-in-snow")
        );
        assert_eq!(slug("日本").as_deref(), None);
        assert!(slug(&"word ".repeat(50)).unwrap().len() <= NAME_CHARS);
    }
}
