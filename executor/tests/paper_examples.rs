//! The worked examples of paper 004 on the reference interpreter
//! (`shared/paper_examples.rs`).

use tra_executor::reference::eval_ia;

#[path = "shared/paper_examples.rs"]
mod examples;
