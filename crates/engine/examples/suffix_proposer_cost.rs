//! Times `SuffixProposer` as a decode loop meets it: one request's first call over a long
//! prompt (the whole prompt goes into its tree), then one call per generated token, with
//! the global tree holding `--cached` finished requests' outputs. Prints the first call's
//! time, the median, 99th-percentile and worst per-step time, the draft tokens offered, the
//! global tree's node count and memory, and the process's resident memory after it was
//! filled (Linux).
//!
//! The tokens are synthetic but repetitive like text: phrases of 4 to 12 tokens drawn from a
//! fixed pool of 400 over a 49152-token vocabulary, with a fresh random token now and then.
//!
//! Usage: `cargo run --profile ci -p tokenmill-engine --example suffix_proposer_cost [--
//! --prompt 8192] [--steps 2000] [--cached 1000] [--output 256] [--k 8]` (the defaults).
use std::time::Instant;
use tokenmill_engine::config::speculative_config::SuffixSettings;
use tokenmill_engine::sched::request::SeqId;
use tokenmill_engine::spec_decode::{Proposer, SuffixProposer};

/// The value after `--name`, parsed, or `default`.
fn flag(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} {v}: expected a count"))
        })
}

/// A small deterministic generator (xorshift64*), so every run sees the same tokens.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// `len` tokens of phrases from `pool`, one in eight tokens a fresh random one.
fn text(rng: &mut Rng, pool: &[Vec<u32>], len: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(len + 12);
    while out.len() < len {
        if rng.below(8) == 0 {
            out.push(rng.below(49_152) as u32);
        } else {
            out.extend_from_slice(&pool[rng.below(pool.len() as u64) as usize]);
        }
    }
    out.truncate(len);
    out
}

/// This process's resident set size, from /proc (Linux only).
fn resident_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let prompt_len = flag("--prompt", 8192);
    let steps = flag("--steps", 2000);
    let cached = flag("--cached", 1000);
    let output_len = flag("--output", 256);
    let k = flag("--k", 8);
    let settings = SuffixSettings {
        max_tree_depth: 24,
        max_cached_requests: 10_000,
        max_spec_factor: 1.0,
        min_token_prob: 0.1,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pool: Vec<Vec<u32>> = (0..400)
        .map(|_| {
            let n = 4 + rng.below(9) as usize;
            (0..n).map(|_| rng.below(49_152) as u32).collect()
        })
        .collect();

    let mut p = SuffixProposer::from_settings(&settings);
    let t = Instant::now();
    for i in 0..cached {
        let mut tokens = text(&mut rng, &pool, 64);
        tokens.extend(text(&mut rng, &pool, output_len));
        p.finished(SeqId(i as u64), &tokens, 64);
    }
    let fill = t.elapsed();
    let resident = resident_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"));

    let mut seq = text(&mut rng, &pool, prompt_len);
    let continuation = text(&mut rng, &pool, steps);
    let id = SeqId(u64::MAX);
    let t = Instant::now();
    let mut drafted = p.propose(id, &seq, prompt_len, k).len();
    let first = t.elapsed();
    let mut times = Vec::with_capacity(steps);
    for &token in &continuation {
        seq.push(token);
        let t = Instant::now();
        drafted += p.propose(id, &seq, prompt_len, k).len();
        times.push(t.elapsed());
    }
    times.sort();
    let global_nodes = p.global_tree().node_count();
    let global_mib = p.global_tree().heap_bytes() as f64 / (1024.0 * 1024.0);
    println!(
        "global tree: {cached} outputs of {output_len} tokens, {global_nodes} nodes ({global_mib:.0} MiB), filled in {fill:.2?}, resident {resident}"
    );
    println!("first call over a {prompt_len}-token prompt: {first:.2?}");
    println!(
        "per step over {steps} steps: median {:.2?}, p99 {:.2?}, worst {:.2?}; {drafted} draft tokens offered (k = {k})",
        times[times.len() / 2],
        times[times.len() * 99 / 100],
        times[times.len() - 1],
    );
}
