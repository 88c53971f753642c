//! The random and mixed datasets: prompts of exact token lengths, fitted with the server's
//! tokenizer.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::args::{CommonArgs, DatasetKind};
use crate::datasets::token_counter::TokenCounter;
use crate::datasets::tokenizer::ServerTokenizer;
use crate::load::bench_request::{BenchRequest, Prompt};

/// Reply length when `--output-len` is not given.
const DEFAULT_OUTPUT_LEN: usize = 128;
/// Token ids used blind when no tokenizer is reachable; nearly every vocabulary is this large.
const BLIND_TOKEN_IDS: std::ops::Range<u32> = 1000..30000;
/// Tokenize/detokenize round trips allowed per prompt before settling for the nearest length.
const FIT_ATTEMPTS: usize = 12;
/// Prompts fitted at once: enough to hide round-trip latency, few enough not to load the server.
const PARALLEL_FITS: usize = 8;

/// Lengths and seed of the random dataset; the mixed one puts long prompts first.
#[derive(Clone, Debug)]
pub struct RandomShape {
    /// All prompts, the long ones included.
    pub count: usize,
    /// The first `long_count` prompts have exactly `long_input_len` tokens after the prefix.
    pub long_count: usize,
    pub long_input_len: usize,
    pub input_len: usize,
    pub output_len: usize,
    pub range_ratio: f64,
    pub prefix_len: usize,
    pub seed: u64,
}

impl RandomShape {
    pub fn from_args(args: &CommonArgs) -> anyhow::Result<Self> {
        if !(0.0..1.0).contains(&args.range_ratio) {
            anyhow::bail!("--range-ratio must be in [0, 1), got {}", args.range_ratio);
        }
        if args.input_len + args.prefix_len == 0 {
            anyhow::bail!("--input-len plus --prefix-len must be at least 1");
        }
        let output_len = args.output_len.unwrap_or(DEFAULT_OUTPUT_LEN);
        if output_len == 0 {
            anyhow::bail!("--output-len must be at least 1");
        }
        let long_count = args.leading_requests();
        if args.dataset == DatasetKind::Mixed {
            check_mixed(args)?;
        }
        Ok(RandomShape {
            count: args.num_prompts,
            long_count,
            long_input_len: args.long_input_len,
            input_len: args.input_len,
            output_len,
            range_ratio: args.range_ratio,
            prefix_len: args.prefix_len,
            seed: args.seed,
        })
    }

    /// Per request: (prompt tokens after the prefix, reply tokens), uniform within the range
    /// ratio; the long prompts come first and keep their length exactly.
    pub fn lengths(&self, rng: &mut StdRng) -> Vec<(usize, usize)> {
        (0..self.count)
            .map(|index| {
                let input = if index < self.long_count {
                    self.long_input_len
                } else {
                    draw_len(self.input_len, self.range_ratio, rng)
                };
                let output = draw_len(self.output_len, self.range_ratio, rng).max(1);
                (input, output)
            })
            .collect()
    }
}

/// The mixed dataset needs at least one long prompt, and long ones longer than any short one.
fn check_mixed(args: &CommonArgs) -> anyhow::Result<()> {
    if args.num_long_prompts == 0 || args.num_long_prompts > args.num_prompts {
        anyhow::bail!(
            "--num-long-prompts must be between 1 and --num-prompts ({}), got {}",
            args.num_prompts,
            args.num_long_prompts
        );
    }
    let longest_short = (args.input_len as f64 * (1.0 + args.range_ratio)).round() as usize;
    if args.long_input_len <= longest_short {
        anyhow::bail!(
            "--long-input-len ({}) must exceed the longest short prompt ({longest_short} tokens)",
            args.long_input_len
        );
    }
    Ok(())
}

fn draw_len(center: usize, ratio: f64, rng: &mut StdRng) -> usize {
    let low = (center as f64 * (1.0 - ratio)).round() as usize;
    let high = (center as f64 * (1.0 + ratio)).round() as usize;
    rng.random_range(low..=high.max(low))
}

/// Builds the random requests. Without a tokenizer, completions get raw token ids (exact
/// length, blind ids) and chat gets made-up words (approximate length).
pub async fn build(
    shape: &RandomShape,
    counter: &TokenCounter,
    token_ids_allowed: bool,
) -> anyhow::Result<Vec<BenchRequest>> {
    let mut rng = StdRng::seed_from_u64(shape.seed);
    let lengths = shape.lengths(&mut rng);
    match counter {
        TokenCounter::Exact(tokenizer) => fit_all(shape, &lengths, tokenizer, &mut rng).await,
        TokenCounter::ApproximateWords if token_ids_allowed => {
            eprintln!("warning: sending random token ids {BLIND_TOKEN_IDS:?} as prompts");
            Ok(blind_token_prompts(shape, &lengths, &mut rng))
        }
        TokenCounter::ApproximateWords => {
            eprintln!("warning: chat prompts are made-up words; one word is counted as one token");
            Ok(word_prompts(shape, &lengths, &mut rng))
        }
    }
}

/// The prefix-repetition requests: prompt `i` starts with prefix `i % num_prefixes` (each
/// prefix drawn with its own seed), then the lot is shuffled with the seed. Always text, so a
/// router that matches prefixes on text sees the shared part.
pub async fn build_prefix_groups(
    shape: &RandomShape,
    num_prefixes: usize,
    counter: &TokenCounter,
) -> anyhow::Result<Vec<BenchRequest>> {
    if num_prefixes == 0 || shape.prefix_len == 0 {
        anyhow::bail!(
            "the prefix-repetition dataset needs --num-prefixes and --prefix-len of at least 1"
        );
    }
    let mut groups = Vec::with_capacity(num_prefixes);
    for group in 0..num_prefixes {
        let members = (shape.count + num_prefixes - 1 - group) / num_prefixes;
        let group_shape = RandomShape {
            count: members,
            seed: shape.seed.wrapping_add(group as u64 * 7_919),
            ..shape.clone()
        };
        if members > 0 {
            groups.push(build(&group_shape, counter, false).await?.into_iter());
        }
    }
    // Round the prefixes in turn, then shuffle: arrival order says nothing about the prefix.
    let mut requests = Vec::with_capacity(shape.count);
    while requests.len() < shape.count {
        let before = requests.len();
        requests.extend(groups.iter_mut().filter_map(Iterator::next));
        if requests.len() == before {
            break;
        }
    }
    requests.shuffle(&mut StdRng::seed_from_u64(shape.seed));
    Ok(requests)
}

fn blind_token_prompts(
    shape: &RandomShape,
    lengths: &[(usize, usize)],
    rng: &mut StdRng,
) -> Vec<BenchRequest> {
    let prefix: Vec<u32> = (0..shape.prefix_len)
        .map(|_| rng.random_range(BLIND_TOKEN_IDS))
        .collect();
    lengths
        .iter()
        .map(|&(input, output)| {
            let mut ids = prefix.clone();
            ids.extend((0..input).map(|_| rng.random_range(BLIND_TOKEN_IDS)));
            BenchRequest {
                prompt_len: ids.len(),
                prompt: Prompt::TokenIds(ids),
                output_len: output,
            }
        })
        .collect()
}

fn word_prompts(
    shape: &RandomShape,
    lengths: &[(usize, usize)],
    rng: &mut StdRng,
) -> Vec<BenchRequest> {
    let prefix: Vec<String> = (0..shape.prefix_len).map(|_| made_up_word(rng)).collect();
    lengths
        .iter()
        .map(|&(input, output)| {
            let mut words = prefix.clone();
            words.extend((0..input).map(|_| made_up_word(rng)));
            BenchRequest {
                prompt_len: words.len(),
                prompt: Prompt::Text(words.join(" ")),
                output_len: output,
            }
        })
        .collect()
}

/// A pronounceable nonsense word, so random text still tokenizes into ordinary pieces.
fn made_up_word(rng: &mut StdRng) -> String {
    const CONSONANTS: &[u8] = b"bcdfghklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    let syllables = rng.random_range(1..=3);
    let mut word = String::with_capacity(syllables * 2);
    for _ in 0..syllables {
        word.push(CONSONANTS[rng.random_range(0..CONSONANTS.len())] as char);
        word.push(VOWELS[rng.random_range(0..VOWELS.len())] as char);
    }
    word
}

/// Real token ids of this model, gathered by tokenizing made-up text: random picks from
/// them never hit unused or special ids, which a blind range could.
async fn token_pool(tokenizer: &ServerTokenizer, rng: &mut StdRng) -> anyhow::Result<Vec<u32>> {
    let text: Vec<String> = (0..2000).map(|_| made_up_word(rng)).collect();
    let mut pool = tokenizer.tokenize(&text.join(" ")).await?;
    pool.sort_unstable();
    pool.dedup();
    if pool.is_empty() {
        anyhow::bail!("/tokenize returned no tokens for sample text");
    }
    Ok(pool)
}

async fn fit_all(
    shape: &RandomShape,
    lengths: &[(usize, usize)],
    tokenizer: &ServerTokenizer,
    rng: &mut StdRng,
) -> anyhow::Result<Vec<BenchRequest>> {
    let pool = Arc::new(token_pool(tokenizer, rng).await?);
    let prefix = shared_prefix(shape.prefix_len, tokenizer, &pool, rng).await?;
    let semaphore = Arc::new(tokio::sync::Semaphore::new(PARALLEL_FITS));
    let mut tasks = JoinSet::new();
    for (index, &(input, output)) in lengths.iter().enumerate() {
        let job = FitJob {
            tokenizer: tokenizer.clone(),
            pool: pool.clone(),
            start: prefix
                .iter()
                .copied()
                .chain((0..input).map(|_| pick(&pool, rng)))
                .collect(),
            target: shape.prefix_len + input,
            rng: StdRng::seed_from_u64(rng.random()),
        };
        let semaphore = semaphore.clone();
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            (index, output, job.run().await)
        });
    }
    collect_fits(tasks, lengths.len()).await
}

async fn collect_fits(
    mut tasks: JoinSet<FitOutcome>,
    count: usize,
) -> anyhow::Result<Vec<BenchRequest>> {
    let mut slots: Vec<Option<BenchRequest>> = vec![None; count];
    while let Some(joined) = tasks.join_next().await {
        let (index, output_len, fitted) = joined?;
        let (text, prompt_len) = fitted?;
        slots[index] = Some(BenchRequest {
            prompt: Prompt::Text(text),
            prompt_len,
            output_len,
        });
    }
    Ok(slots.into_iter().flatten().collect())
}

/// The prefix is fitted on its own first, so every prompt starts with the same ids that
/// survive a detokenize/tokenize round trip.
async fn shared_prefix(
    len: usize,
    tokenizer: &ServerTokenizer,
    pool: &Arc<Vec<u32>>,
    rng: &mut StdRng,
) -> anyhow::Result<Vec<u32>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let job = FitJob {
        tokenizer: tokenizer.clone(),
        pool: pool.clone(),
        start: (0..len).map(|_| pick(pool, rng)).collect(),
        target: len,
        rng: StdRng::seed_from_u64(rng.random()),
    };
    let (text, _) = job.run().await?;
    tokenizer.tokenize(&text).await
}

fn pick(pool: &[u32], rng: &mut StdRng) -> u32 {
    pool[rng.random_range(0..pool.len())]
}

/// A fitted prompt: (dataset index, output length, (text, token count)).
type FitOutcome = (usize, usize, anyhow::Result<(String, usize)>);

/// One prompt being fitted to an exact token count.
struct FitJob {
    tokenizer: ServerTokenizer,
    pool: Arc<Vec<u32>>,
    start: Vec<u32>,
    target: usize,
    rng: StdRng,
}

impl FitJob {
    /// Detokenizes, re-tokenizes and trims or extends until the text is `target` tokens long,
    /// because joining random tokens into text can merge or split them.
    async fn run(mut self) -> anyhow::Result<(String, usize)> {
        let mut ids = std::mem::take(&mut self.start);
        let mut best: Option<(String, usize)> = None;
        for _ in 0..FIT_ATTEMPTS {
            let text = self.tokenizer.detokenize(&ids).await?;
            let tokens = self.tokenizer.tokenize(&text).await?;
            if tokens.len() == self.target {
                return Ok((text, self.target));
            }
            if best.as_ref().is_none_or(|(_, len)| {
                len.abs_diff(self.target) > tokens.len().abs_diff(self.target)
            }) {
                best = Some((text, tokens.len()));
            }
            ids = self.adjust(tokens);
        }
        let (text, len) = best.expect("at least one attempt ran");
        eprintln!(
            "warning: a random prompt has {len} tokens instead of {}",
            self.target
        );
        Ok((text, len))
    }

    fn adjust(&mut self, mut tokens: Vec<u32>) -> Vec<u32> {
        if tokens.len() > self.target {
            tokens.truncate(self.target);
        } else {
            let missing = self.target - tokens.len();
            tokens.extend((0..missing).map(|_| pick(&self.pool, &mut self.rng)));
        }
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(range_ratio: f64) -> RandomShape {
        RandomShape {
            count: 500,
            long_count: 0,
            long_input_len: 0,
            input_len: 100,
            output_len: 20,
            range_ratio,
            prefix_len: 0,
            seed: 3,
        }
    }

    #[test]
    fn lengths_stay_within_the_range_ratio_and_use_all_of_it() {
        let lengths = shape(0.5).lengths(&mut StdRng::seed_from_u64(1));
        let inputs: Vec<usize> = lengths.iter().map(|l| l.0).collect();
        assert!(inputs.iter().all(|&n| (50..=150).contains(&n)));
        assert!(*inputs.iter().min().unwrap() < 60 && *inputs.iter().max().unwrap() > 140);
    }

    #[test]
    fn prefix_groups_share_each_prefix_among_their_prompts_only() {
        let shape = RandomShape {
            count: 48,
            input_len: 5,
            output_len: 8,
            range_ratio: 0.0,
            prefix_len: 30,
            long_count: 0,
            long_input_len: 0,
            seed: 4,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let requests = runtime
            .block_on(build_prefix_groups(
                &shape,
                12,
                &TokenCounter::ApproximateWords,
            ))
            .unwrap();
        assert_eq!(requests.len(), 48);
        let mut prefixes = std::collections::BTreeMap::<String, usize>::new();
        for request in &requests {
            let Prompt::Text(text) = &request.prompt else {
                panic!("prefix-repetition prompts are text");
            };
            let words: Vec<&str> = text.split(' ').collect();
            assert_eq!(words.len(), 35);
            *prefixes.entry(words[..30].join(" ")).or_default() += 1;
        }
        assert_eq!(prefixes.len(), 12, "12 different prefixes");
        assert!(prefixes.values().all(|&n| n == 4), "{prefixes:?}");
        // Shuffled: the first prompts do not simply walk the prefixes in order.
        let first: Vec<&str> = requests[..12]
            .iter()
            .map(|r| match &r.prompt {
                Prompt::Text(t) => &t[..20],
                _ => "",
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert!(distinct.len() < 12, "{first:?}");
    }

    #[test]
    fn zero_range_ratio_gives_exact_lengths() {
        let lengths = shape(0.0).lengths(&mut StdRng::seed_from_u64(1));
        assert!(lengths.iter().all(|&l| l == (100, 20)));
    }

    #[test]
    fn long_prompts_come_first_with_their_exact_length() {
        let mut shape = shape(0.5);
        shape.count = 6;
        (shape.long_count, shape.long_input_len) = (2, 8000);
        let lengths = shape.lengths(&mut StdRng::seed_from_u64(4));
        let inputs: Vec<usize> = lengths.iter().map(|l| l.0).collect();
        assert_eq!(inputs[..2], [8000, 8000]);
        assert!(
            inputs[2..].iter().all(|n| (50..=150).contains(n)),
            "{inputs:?}"
        );
    }

    #[test]
    fn blind_token_prompts_carry_prefix_and_exact_length() {
        let mut shape = shape(0.0);
        shape.prefix_len = 5;
        let mut rng = StdRng::seed_from_u64(2);
        let requests = blind_token_prompts(&shape, &shape.lengths(&mut rng), &mut rng);
        let Prompt::TokenIds(first) = &requests[0].prompt else {
            panic!("expected token ids")
        };
        let Prompt::TokenIds(second) = &requests[1].prompt else {
            panic!("expected token ids")
        };
        assert_eq!(first.len(), 105);
        assert_eq!(requests[0].prompt_len, 105);
        assert_eq!(first[..5], second[..5]);
        assert_ne!(first[5..], second[5..]);
    }
}
