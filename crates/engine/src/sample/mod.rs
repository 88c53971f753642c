//! Sampling: one row of logits to one token, under the request's parameters, logit bias
//! and token constraint (grammar masks computed off the engine thread); a step's rows to
//! each chunk's tokens, drafts verified (`RejectionSampler`).

pub mod logit_bias;
pub mod mask_worker;
pub mod rejection_sampler;
pub mod sampled_token;
pub mod sampler;
pub mod sampling_params;
pub mod token_constraint;
