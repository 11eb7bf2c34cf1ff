//! Where humans see agents and decide for them: the console (AutoGPT's CLI), Discord threads,
//! and any Agent Protocol client (`api`). Each implements `runtime::Surface`; the rules they apply
//! live in `crate::service`.

pub mod api;
pub mod console;
pub mod discord;
pub mod shutdown;
