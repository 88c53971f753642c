//! Replays recorded greedy outputs through a proposer, as greedy verification would meet it:
//! each step drafts up to k tokens after the sequence so far, keeps the drafts that equal
//! the recorded tokens, and gains those plus the target's own next token. Requests run one
//! after another, each finished before the next starts, so a proposer that learns from
//! finished requests sees them in file order. Prints, per proposer, the mean tokens gained
//! per step (1.0 without drafts), the draft tokens offered and the share accepted, and the
//! time spent proposing.
//!
//! Input: one JSON object a line, `{"prompt_ids": [...], "output_ids": [...]}`: e.g. the
//! `token_ids` of `tokenmill generate --json` (the output) beside the prompt's ids from the
//! server's `/tokenize`.
//!
//! Usage: `cargo run --profile ci -p tokenmill-engine --example proposer_replay -- FILE
//! ['{"method":"suffix","num_speculative_tokens":4}' ...]`: each further argument is a
//! `--speculative-config` (ngram or suffix); by default, ngram and suffix with k = 4.
use serde::Deserialize;
use std::time::{Duration, Instant};
use tokenmill_engine::config::speculative_config::{SpeculativeConfig, SpeculativeMethod};
use tokenmill_engine::sched::request::SeqId;
use tokenmill_engine::spec_decode::ngram_proposer::NgramProposer;
use tokenmill_engine::spec_decode::{Proposer, SuffixProposer};

#[derive(Deserialize)]
struct Recorded {
    prompt_ids: Vec<u32>,
    output_ids: Vec<u32>,
}

#[derive(Default)]
struct Tally {
    output_tokens: usize,
    steps: usize,
    drafted: usize,
    accepted: usize,
    proposing: Duration,
}

fn proposer(config: &SpeculativeConfig) -> Box<dyn Proposer> {
    match &config.method {
        SpeculativeMethod::Ngram {
            prompt_lookup_min,
            prompt_lookup_max,
        } => Box::new(NgramProposer::new(*prompt_lookup_min, *prompt_lookup_max)),
        SpeculativeMethod::Suffix(s) => Box::new(SuffixProposer::from_settings(s)),
        SpeculativeMethod::DraftModel { .. } => {
            panic!("method draft_model needs a model run; this replays ngram and suffix only")
        }
    }
}

fn replay(requests: &[Recorded], config: &SpeculativeConfig) -> Tally {
    let mut p = proposer(config);
    let k = config.num_speculative_tokens;
    let mut tally = Tally::default();
    for (n, r) in requests.iter().enumerate() {
        let id = SeqId(n as u64);
        let prompt_len = r.prompt_ids.len();
        let out = &r.output_ids;
        let mut seq = r.prompt_ids.clone();
        let mut i = 0;
        while i < out.len() {
            let t = Instant::now();
            let draft = p.propose(id, &seq, prompt_len, k);
            tally.proposing += t.elapsed();
            let accepted = draft
                .iter()
                .zip(&out[i..])
                .take_while(|(d, o)| d == o)
                .count();
            let gained = (accepted + 1).min(out.len() - i);
            seq.extend_from_slice(&out[i..i + gained]);
            i += gained;
            tally.steps += 1;
            tally.drafted += draft.len();
            tally.accepted += accepted;
        }
        p.finished(id, &seq, prompt_len);
        tally.output_tokens += out.len();
    }
    tally
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args
        .first()
        .expect("usage: proposer_replay FILE [SPECULATIVE_CONFIG ...]");
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let requests: Vec<Recorded> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{file} line {}: {e}", n + 1))
        })
        .collect();
    let configs: Vec<String> = match &args[1..] {
        [] => vec![
            r#"{"method":"ngram","num_speculative_tokens":4}"#.into(),
            r#"{"method":"suffix","num_speculative_tokens":4}"#.into(),
        ],
        given => given.to_vec(),
    };
    println!(
        "{} requests, {} output tokens",
        requests.len(),
        requests.iter().map(|r| r.output_ids.len()).sum::<usize>()
    );
    for json in &configs {
        let config = SpeculativeConfig::from_json(json).unwrap_or_else(|e| panic!("{e}"));
        let t = replay(&requests, &config);
        println!(
            "{json}: {:.3} tokens per step, {} drafted, {:.1}% accepted, {:.2?} proposing ({:.2?} per step)",
            t.output_tokens as f64 / t.steps as f64,
            t.drafted,
            100.0 * t.accepted as f64 / t.drafted.max(1) as f64,
            t.proposing,
            t.proposing / t.steps.max(1) as u32,
        );
    }
}
