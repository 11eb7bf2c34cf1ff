//! Where humans see agents and decide for them: the console (AutoGPT's CLI) and Discord threads.
//! Both implement `runtime::Surface`; the rules they apply live in `crate::service`.

pub mod console;
pub mod discord;
