//! The requests of a run: prompts with their token counts, loaded from one of the datasets.

use std::path::Path;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::args::{CommonArgs, DatasetKind};
use crate::datasets::grounded_prompts::GroundedPrompts;
use crate::datasets::open_chat_prompts::OpenChatPrompts;
use crate::datasets::random_prompts::{self, RandomShape};
use crate::datasets::token_counter::TokenCounter;
use crate::load::bench_request::{BenchRequest, Prompt};
use crate::load::endpoint::Endpoint;

/// Default reply length when the dataset does not give one.
const DEFAULT_OUTPUT_LEN: usize = 128;
/// Default reply cap of the generated chat datasets: room for a rewritten function or table,
/// which the model usually ends itself.
const DEFAULT_CHAT_OUTPUT_LEN: usize = 256;

/// A prompt read from a file, before its tokens are counted.
#[derive(Clone)]
struct FilePrompt {
    prompt: String,
    /// Reply length the file asks for, or the reference reply to measure it from.
    output: FileOutput,
}

#[derive(Clone)]
enum FileOutput {
    Given(usize),
    Reference(String),
    Unspecified,
}

/// Builds `args.num_prompts` requests from the chosen dataset.
pub async fn load(args: &CommonArgs, counter: &TokenCounter) -> anyhow::Result<Vec<BenchRequest>> {
    if args.num_prompts == 0 {
        anyhow::bail!("--num-prompts must be at least 1");
    }
    match args.dataset {
        DatasetKind::Random | DatasetKind::Mixed => {
            let shape = RandomShape::from_args(args)?;
            let token_ids_allowed = args.endpoint == Endpoint::Completions;
            random_prompts::build(&shape, counter, token_ids_allowed).await
        }
        DatasetKind::PrefixRepetition => {
            let shape = RandomShape::from_args(args)?;
            random_prompts::build_prefix_groups(&shape, args.num_prefixes, counter).await
        }
        DatasetKind::Grounded | DatasetKind::OpenChat | DatasetKind::GroundedMix => {
            if args.endpoint != Endpoint::Chat {
                anyhow::bail!(
                    "--dataset {} is sent as chat messages, so the chat template applies; \
                     add --endpoint chat",
                    dataset_name(args.dataset)
                );
            }
            let prompts = generated_chat_prompts(args.dataset, args.num_prompts, args.seed)
                .into_iter()
                .map(|prompt| FilePrompt {
                    prompt,
                    output: FileOutput::Given(DEFAULT_CHAT_OUTPUT_LEN),
                })
                .collect();
            measure(prompts, args.output_len, counter).await
        }
        DatasetKind::Sharegpt => {
            let path = dataset_path(args)?;
            let prompts = read_sharegpt(path, args.seed)?;
            measure(
                cycle(prompts, args.num_prompts, path),
                args.output_len,
                counter,
            )
            .await
        }
        DatasetKind::Jsonl => {
            let path = dataset_path(args)?;
            let prompts = read_jsonl(path)?;
            measure(
                cycle(prompts, args.num_prompts, path),
                args.output_len,
                counter,
            )
            .await
        }
    }
}

/// The dataset's name as `--dataset` spells it.
fn dataset_name(kind: DatasetKind) -> String {
    use clap::ValueEnum;
    kind.to_possible_value()
        .map_or_else(|| format!("{kind:?}"), |v| v.get_name().to_owned())
}

/// `count` prompts of a generated chat dataset, from `seed`; the mix takes grounded and
/// open-chat prompts in turn, each from its own stream, so its grounded prompts are the
/// grounded dataset's first ones.
fn generated_chat_prompts(kind: DatasetKind, count: usize, seed: u64) -> Vec<String> {
    match kind {
        DatasetKind::Grounded => GroundedPrompts::new(seed).take(count).collect(),
        DatasetKind::OpenChat => OpenChatPrompts::new(seed).take(count).collect(),
        _ => {
            let mut grounded = GroundedPrompts::new(seed);
            let mut open = OpenChatPrompts::new(seed);
            (0..count)
                .filter_map(|i| {
                    if i % 2 == 0 {
                        grounded.next()
                    } else {
                        open.next()
                    }
                })
                .collect()
        }
    }
}

fn dataset_path(args: &CommonArgs) -> anyhow::Result<&Path> {
    args.dataset_path
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--dataset {:?} needs --dataset-path", args.dataset))
}

/// Repeats the file's prompts in order when it holds fewer than asked for.
fn cycle(prompts: Vec<FilePrompt>, count: usize, path: &Path) -> Vec<FilePrompt> {
    if prompts.len() < count {
        eprintln!(
            "note: {} holds {} usable prompts; reusing them to reach {count}",
            path.display(),
            prompts.len()
        );
    }
    prompts.into_iter().cycle().take(count).collect()
}

async fn measure(
    prompts: Vec<FilePrompt>,
    output_override: Option<usize>,
    counter: &TokenCounter,
) -> anyhow::Result<Vec<BenchRequest>> {
    let mut requests = Vec::with_capacity(prompts.len());
    for file_prompt in prompts {
        let prompt_len = counter.count(&file_prompt.prompt).await?;
        let output_len = match (output_override, file_prompt.output) {
            (Some(len), _) | (None, FileOutput::Given(len)) => len,
            (None, FileOutput::Reference(reply)) => counter.count(&reply).await?.max(1),
            (None, FileOutput::Unspecified) => DEFAULT_OUTPUT_LEN,
        };
        requests.push(BenchRequest {
            prompt: Prompt::Text(file_prompt.prompt),
            prompt_len,
            output_len,
        });
    }
    Ok(requests)
}

/// ShareGPT: a JSON list of `{"conversations": [{"from", "value"}, ...]}`; the first turn is
/// the prompt and the second the reference reply. Entries are shuffled with the seed.
fn read_sharegpt(path: &Path, seed: u64) -> anyhow::Result<Vec<FilePrompt>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let entries: Vec<serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON list of conversations", path.display()))?;
    let mut prompts: Vec<FilePrompt> = entries.iter().filter_map(sharegpt_pair).collect();
    if prompts.is_empty() {
        anyhow::bail!(
            "{} holds no conversation with a prompt and a reply",
            path.display()
        );
    }
    prompts.shuffle(&mut StdRng::seed_from_u64(seed));
    Ok(prompts)
}

fn sharegpt_pair(entry: &serde_json::Value) -> Option<FilePrompt> {
    let turns = entry.get("conversations")?.as_array()?;
    let prompt = turns.first()?.get("value")?.as_str()?;
    let reply = turns.get(1)?.get("value")?.as_str()?;
    if prompt.trim().is_empty() || reply.trim().is_empty() {
        return None;
    }
    Some(FilePrompt {
        prompt: prompt.to_owned(),
        output: FileOutput::Reference(reply.to_owned()),
    })
}

/// JSONL: per line, `{"prompt": ..., "output_len"?: n}`, a JSON string, or plain text.
fn read_jsonl(path: &Path) -> anyhow::Result<Vec<FilePrompt>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut prompts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let prompt = parse_jsonl_line(line)
            .with_context(|| format!("{} line {}", path.display(), index + 1))?;
        prompts.push(prompt);
    }
    if prompts.is_empty() {
        anyhow::bail!("{} holds no prompt", path.display());
    }
    Ok(prompts)
}

fn parse_jsonl_line(line: &str) -> anyhow::Result<FilePrompt> {
    if !(line.starts_with('{') || line.starts_with('"')) {
        return Ok(FilePrompt {
            prompt: line.to_owned(),
            output: FileOutput::Unspecified,
        });
    }
    let value: serde_json::Value = serde_json::from_str(line).context("invalid JSON")?;
    if let Some(text) = value.as_str() {
        return Ok(FilePrompt {
            prompt: text.to_owned(),
            output: FileOutput::Unspecified,
        });
    }
    let prompt = value["prompt"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("JSON object without a \"prompt\" string"))?;
    let output = match value.get("output_len").or_else(|| value.get("max_tokens")) {
        None => FileOutput::Unspecified,
        Some(len) => FileOutput::Given(
            len.as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| anyhow::anyhow!("output_len must be a positive integer"))?
                as usize,
        ),
    };
    Ok(FilePrompt {
        prompt: prompt.to_owned(),
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_alternates_grounded_and_open_chat_prompts_from_their_own_streams() {
        let grounded = generated_chat_prompts(DatasetKind::Grounded, 3, 9);
        let open = generated_chat_prompts(DatasetKind::OpenChat, 3, 9);
        let mix = generated_chat_prompts(DatasetKind::GroundedMix, 6, 9);
        assert_eq!(
            mix,
            vec![
                grounded[0].clone(),
                open[0].clone(),
                grounded[1].clone(),
                open[1].clone(),
                grounded[2].clone(),
                open[2].clone()
            ]
        );
        assert_eq!(generated_chat_prompts(DatasetKind::GroundedMix, 6, 9), mix);
    }

    #[test]
    fn generated_chat_datasets_refuse_the_completions_endpoint_by_name() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let args = Cli::parse_from(["bench", "--dataset", "grounded-mix", "--num-prompts", "2"]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let error = runtime
            .block_on(load(&args.common, &TokenCounter::ApproximateWords))
            .unwrap_err()
            .to_string();
        assert!(error.contains("--dataset grounded-mix"), "{error}");
        assert!(error.contains("--endpoint chat"), "{error}");

        let chat = Cli::parse_from([
            "bench",
            "--dataset",
            "grounded",
            "--endpoint",
            "chat",
            "--num-prompts",
            "4",
        ]);
        let requests = runtime
            .block_on(load(&chat.common, &TokenCounter::ApproximateWords))
            .unwrap();
        assert_eq!(requests.len(), 4);
        assert!(requests
            .iter()
            .all(|r| r.output_len == DEFAULT_CHAT_OUTPUT_LEN));
    }

    #[test]
    fn jsonl_accepts_objects_strings_and_plain_lines() {
        let object = parse_jsonl_line(r#"{"prompt": "a b", "output_len": 7}"#).unwrap();
        assert_eq!(object.prompt, "a b");
        assert!(matches!(object.output, FileOutput::Given(7)));
        assert_eq!(parse_jsonl_line(r#""quoted""#).unwrap().prompt, "quoted");
        assert_eq!(parse_jsonl_line("just text").unwrap().prompt, "just text");
    }

    #[test]
    fn jsonl_object_without_prompt_is_an_error() {
        assert!(parse_jsonl_line(r#"{"text": "a"}"#).is_err());
        assert!(parse_jsonl_line(r#"{"prompt": "a", "output_len": 0}"#).is_err());
        assert!(parse_jsonl_line("{broken").is_err());
    }

    #[test]
    fn sharegpt_takes_first_two_turns_and_skips_short_conversations() {
        let entry = serde_json::json!({"conversations": [
            {"from": "human", "value": "question"}, {"from": "gpt", "value": "answer"}]});
        let pair = sharegpt_pair(&entry).unwrap();
        assert_eq!(pair.prompt, "question");
        assert!(matches!(pair.output, FileOutput::Reference(ref r) if r == "answer"));
        let lone = serde_json::json!({"conversations": [{"from": "human", "value": "q"}]});
        assert!(sharegpt_pair(&lone).is_none());
    }
}
