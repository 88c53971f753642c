//! One generation, whatever the protocol: the checked plan of a request (`request_plan`,
//! under `field_policy`), the chat prompt it renders (`chat_prompt`), its engine requests
//! queued (`engine_runs`), and each choice's engine events turned into text deltas
//! (`choice_run`) or gathered whole (`choice_total`). A protocol reads its request into a
//! plan here and shapes the deltas into its own reply.

pub mod chat_prompt;
pub mod choice_run;
pub mod choice_total;
pub mod engine_runs;
pub mod field_policy;
pub mod reply_id;
pub mod request_plan;
