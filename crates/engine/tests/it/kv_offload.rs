//! The prefix cache's disk tier (`--kv-offload-dir`): a restarted engine serves a prompt's
//! prefix from the files an earlier one wrote, with the cold run's exact output; files of
//! another model or KV dtype, torn or corrupted files and an unwritable directory are never
//! served and never fail a request; a process killed mid-write leaves nothing wrong behind.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::core::completion::collect_completion;
use tokenmill_engine::kv::block_manager::BlockHash;
use tokenmill_engine::kv::kv_disk_tier::KvOffloadConfig;
use tokenmill_engine::sample::sampling_params::SamplingParams;
use tokenmill_engine::sched::request::{Request, RequestEvent};
use tokenmill_engine::{Engine, EngineConfig};
use tokio::sync::mpsc::UnboundedReceiver;

const BLOCK: usize = 16;

/// A prompt of `len` token ids spread over the vocabulary, different for each `salt`.
fn prompt(len: usize, salt: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + salt * 104_729 + 101) % 49_000) as u32 + 10)
        .collect()
}

fn request(prompt: &[u32], max_tokens: usize) -> Request {
    Request {
        prompt: prompt.to_vec(),
        params: SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(max_tokens)
        },
        priority: 0,
        constraint: None,
    }
}

fn config(dtype: KvCacheDtype) -> EngineConfig {
    EngineConfig {
        num_kv_blocks: Some(160),
        kv_cache_dtype: dtype,
        ..EngineConfig::DEFAULT
    }
}

fn offload(dir: &Path, identity: u8) -> KvOffloadConfig {
    KvOffloadConfig {
        dir: dir.to_path_buf(),
        max_bytes: None,
        model_identity: [identity; 32],
    }
}

/// A fresh engine on the default model, writing through to `dir` when given.
fn engine(dtype: KvCacheDtype, dir: Option<&KvOffloadConfig>) -> Engine {
    let mut engine = common::load_engine(config(dtype));
    if let Some(dir) = dir {
        engine.enable_kv_offload(dir);
    }
    engine
}

/// Greedy output of one request on `engine`.
fn run(engine: &mut Engine, prompt: &[u32], max_tokens: usize) -> Vec<u32> {
    let out = engine
        .generate(vec![request(prompt, max_tokens)])
        .expect("generates");
    out[0].token_ids()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tokenmill-kv-offload-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every block file under `dir`.
fn block_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for folder in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(folder.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if f.path().extension().is_some_and(|e| e == "kvb") {
                out.push(f.path());
            }
        }
    }
    out
}

/// The file of block `b` of `prompt`.
fn file_of(dir: &Path, prompt: &[u32], b: usize) -> PathBuf {
    let name = format!(
        "{}.kvb",
        BlockHash::of_full_blocks(prompt, BLOCK)[b].to_hex()
    );
    block_files(dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == name.as_str()))
        .expect("the block was written")
}

#[test]
fn a_restarted_engine_serves_a_long_prompt_from_disk_with_the_cold_runs_output() {
    common::skip_without_model!();
    restart_serves_from_disk(KvCacheDtype::Auto, "restart");
}

#[test]
fn a_q8_0_cache_restarted_serves_from_disk_with_the_cold_runs_output() {
    common::skip_without_model!();
    // Its pages are two arrays (int8s and scales): both must come back.
    restart_serves_from_disk(KvCacheDtype::Q8_0, "restart-q8");
}

#[test]
fn an_fp8_cache_restarted_serves_from_disk_with_the_cold_runs_output() {
    common::skip_without_model!();
    // Its pages are e4m3 bytes and one scale per head's row: both must come back.
    restart_serves_from_disk(KvCacheDtype::Fp8, "restart-fp8");
}

fn restart_serves_from_disk(dtype: KvCacheDtype, name: &str) {
    let dir = temp_dir(name);
    let long = prompt(1_050, 1);
    let cold = run(&mut engine(dtype, None), &long, 12);
    let mut first = engine(dtype, Some(&offload(&dir, 1)));
    assert_eq!(run(&mut first, &long, 12), cold);
    assert_eq!(first.stats().disk_cache_hits, 0);
    drop(first); // Stops the writer once every block is on disk.
    let blocks = (long.len() - 1) / BLOCK;
    assert!(block_files(&dir).len() >= blocks);

    let mut restarted = engine(dtype, Some(&offload(&dir, 1)));
    let out = restarted
        .generate(vec![request(&long, 12)])
        .expect("generates");
    assert_eq!(
        out[0].token_ids(),
        cold,
        "served from disk, the output changed"
    );
    assert_eq!(out[0].cached_prompt_tokens, blocks * BLOCK);
    let stats = restarted.stats();
    assert_eq!(stats.disk_cache_hits, (blocks * BLOCK) as u64);
    assert_eq!(stats.disk_cache_queries, long.len() as u64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `long`'s blocks to `dir` through a first engine (dropped, so all are on disk).
fn write_through(dir: &Path, long: &[u32]) {
    let mut first = engine(KvCacheDtype::Auto, Some(&offload(dir, 1)));
    run(&mut first, long, 1);
}

/// The token events that arrived on `rx` so far.
fn tokens_so_far(rx: &mut UnboundedReceiver<RequestEvent>) -> usize {
    std::iter::from_fn(|| rx.try_recv().ok())
        .filter(|e| matches!(e, RequestEvent::Token { .. }))
        .count()
}

#[test]
fn a_running_decode_keeps_producing_tokens_while_another_requests_disk_reads_are_in_flight() {
    common::skip_without_model!();
    let dir = temp_dir("overlap");
    let long = prompt(600, 7);
    let short = prompt(40, 8);
    let mut cold_engine = engine(KvCacheDtype::Auto, None);
    let (cold_long, cold_short) = (
        run(&mut cold_engine, &long, 6),
        run(&mut cold_engine, &short, 30),
    );
    drop(cold_engine);
    write_through(&dir, &long);

    let mut restarted = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
    let (_, mut decode) = restarted.add_request(request(&short, 30)).unwrap();
    restarted.step().unwrap(); // The short prompt's prefill: its first token.
                               // The reader starts nothing while held: every step until the hold is dropped runs
                               // while the long prompt's reads are in flight.
    let hold = restarted.hold_kv_offload_reads().expect("the tier is on");
    let (_, loading) = restarted.add_request(request(&long, 6)).unwrap();
    let before = tokens_so_far(&mut decode);
    for _ in 0..8 {
        restarted.step().unwrap();
        assert_eq!(
            restarted.stats().num_loading,
            1,
            "the long prompt left its read"
        );
    }
    assert_eq!(
        tokens_so_far(&mut decode),
        8,
        "a decode step was skipped during the read"
    );
    assert_eq!(before, 1);
    assert_eq!(restarted.kv_offload_stats().unwrap().blocks_read, 0);
    drop(hold);
    while restarted.has_unfinished() {
        restarted.step().unwrap();
    }
    let long_done = collect_completion(loading).expect("finished");
    assert_eq!(
        long_done.token_ids(),
        cold_long,
        "served from disk, the output changed"
    );
    let blocks = (long.len() - 1) / BLOCK;
    assert_eq!(long_done.cached_prompt_tokens, blocks * BLOCK);
    assert_eq!(restarted.stats().disk_cache_hits, (blocks * BLOCK) as u64);
    assert_eq!(restarted.stats().num_loading, 0);
    let mut rest = tokens_so_far(&mut decode);
    rest += 9; // The tokens counted above.
    assert_eq!(rest, cold_short.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn blocks_deleted_or_corrupted_after_the_lookup_are_computed_with_the_cold_runs_output() {
    common::skip_without_model!();
    let dir = temp_dir("vanished");
    let long = prompt(500, 10);
    let cold = run(&mut engine(KvCacheDtype::Auto, None), &long, 8);
    write_through(&dir, &long);
    for (damage, name) in [(12, "corrupted"), (0, "deleted")] {
        let mut restarted = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
        let hold = restarted.hold_kv_offload_reads().expect("the tier is on");
        let (_, rx) = restarted.add_request(request(&long, 8)).unwrap();
        restarted.step().unwrap();
        assert_eq!(restarted.stats().num_loading, 1, "found on disk");
        // Between the lookup (which saw every file) and the read.
        let file = file_of(&dir, &long, damage);
        if name == "deleted" {
            std::fs::remove_file(&file).unwrap();
        } else {
            let mut bytes = std::fs::read(&file).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x08;
            std::fs::write(&file, bytes).unwrap();
        }
        drop(hold);
        while restarted.has_unfinished() {
            restarted.step().unwrap();
        }
        let done = collect_completion(rx).expect("finished");
        assert_eq!(done.token_ids(), cold, "block {damage} {name}");
        assert_eq!(restarted.stats().disk_cache_hits, (damage * BLOCK) as u64);
        assert_eq!(done.cached_prompt_tokens, damage * BLOCK);
        let bad = u64::from(name == "corrupted");
        assert_eq!(restarted.kv_offload_stats().unwrap().bad_files, bad);
        // The restarted engine wrote the recomputed blocks back for the next round.
        drop(restarted);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The zoo's tiny gemma-3 (six sliding-window layers of window 8 beside a global one) on
/// the exact path, blocks of 8 tokens, writing through to `dir` when given.
fn gemma3(dir: Option<&KvOffloadConfig>) -> Engine {
    use tokenmill_engine::config::WeightMode;
    use tokenmill_engine::models::checkpoint;
    let path = common::model::zoo("tiny-gemma3").join("model-f32.gguf");
    let mut ckpt = checkpoint::open(&path).unwrap();
    let config = EngineConfig {
        weight_mode: WeightMode::F32,
        kv_cache_dtype: KvCacheDtype::F32,
        block_size: 8,
        num_kv_blocks: Some(200),
        max_num_batched_tokens: 32,
        max_num_seqs: 4,
        ..EngineConfig::default()
    };
    let mut engine = Engine::load(&mut *ckpt, config).unwrap();
    if let Some(dir) = dir {
        engine.enable_kv_offload(dir);
    }
    engine
}

#[test]
fn a_sliding_window_model_restarted_serves_from_disk_with_the_cold_runs_output() {
    let dir = temp_dir("gemma3");
    // Token ids under the zoo's vocabulary of 512; a prompt of many windows.
    let long: Vec<u32> = (0..150).map(|i| ((i * 37 + 11) % 500) as u32 + 2).collect();
    let cold = run(&mut gemma3(None), &long, 10);
    let mut first = gemma3(Some(&offload(&dir, 3)));
    assert_eq!(run(&mut first, &long, 10), cold);
    drop(first);
    let blocks = (long.len() - 1) / 8;
    let files = block_files(&dir);
    assert!(files.len() >= blocks, "{} files", files.len());

    let mut restarted = gemma3(Some(&offload(&dir, 3)));
    assert_eq!(
        run(&mut restarted, &long, 10),
        cold,
        "served from disk, the output changed"
    );
    assert_eq!(restarted.stats().disk_cache_hits, (blocks * 8) as u64);
    drop(restarted);

    // A block whose file is corrupted between the lookup and the read: the prompt is
    // admitted again with what came back and computes the rest.
    let mut restarted = gemma3(Some(&offload(&dir, 3)));
    let hold = restarted.hold_kv_offload_reads().expect("the tier is on");
    let (_, rx) = restarted.add_request(request(&long, 10)).unwrap();
    restarted.step().unwrap();
    assert_eq!(restarted.stats().num_loading, 1, "found on disk");
    let name = format!("{}.kvb", BlockHash::of_full_blocks(&long, 8)[9].to_hex());
    let file = block_files(&dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == name.as_str()))
        .expect("block 9 was written");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x08;
    std::fs::write(&file, bytes).unwrap();
    drop(hold);
    while restarted.has_unfinished() {
        restarted.step().unwrap();
    }
    let done = collect_completion(rx).expect("finished");
    assert_eq!(done.token_ids(), cold, "block 9 corrupted");
    assert_eq!(restarted.kv_offload_stats().unwrap().bad_files, 1);
    assert!(
        done.cached_prompt_tokens >= 9 * 8,
        "{}",
        done.cached_prompt_tokens
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_written_for_another_kv_dtype_or_model_gives_no_hits() {
    common::skip_without_model!();
    let dir = temp_dir("foreign");
    let long = prompt(400, 2);
    drop({
        let mut f16 = engine(KvCacheDtype::F16, Some(&offload(&dir, 1)));
        run(&mut f16, &long, 4);
        f16
    });
    assert!(!block_files(&dir).is_empty());
    let cold_bf16 = run(&mut engine(KvCacheDtype::Bf16, None), &long, 4);
    let mut bf16 = engine(KvCacheDtype::Bf16, Some(&offload(&dir, 1)));
    assert_eq!(run(&mut bf16, &long, 4), cold_bf16);
    assert_eq!(bf16.stats().disk_cache_hits, 0);
    let cold_fp8 = run(&mut engine(KvCacheDtype::Fp8, None), &long, 4);
    let mut fp8 = engine(KvCacheDtype::Fp8, Some(&offload(&dir, 1)));
    assert_eq!(run(&mut fp8, &long, 4), cold_fp8);
    assert_eq!(fp8.stats().disk_cache_hits, 0);
    let mut other_model = engine(KvCacheDtype::F16, Some(&offload(&dir, 2)));
    run(&mut other_model, &long, 4);
    assert_eq!(other_model.stats().disk_cache_hits, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_truncated_or_corrupted_block_file_is_not_served() {
    common::skip_without_model!();
    let dir = temp_dir("corrupt");
    let long = prompt(400, 3);
    let cold = run(&mut engine(KvCacheDtype::Auto, None), &long, 8);
    drop({
        let mut first = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
        run(&mut first, &long, 8);
        first
    });
    // Block 10 cut short, block 5 with one byte of its page flipped: only 0..5 are served.
    let cut = file_of(&dir, &long, 10);
    let len = std::fs::metadata(&cut).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let flipped = file_of(&dir, &long, 5);
    let mut bytes = std::fs::read(&flipped).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&flipped, bytes).unwrap();

    let mut restarted = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
    assert_eq!(run(&mut restarted, &long, 8), cold);
    assert_eq!(restarted.stats().disk_cache_hits, (5 * BLOCK) as u64);
    assert_eq!(restarted.kv_offload_stats().unwrap().bad_files, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_directory_leaves_the_engine_serving_from_ram() {
    common::skip_without_model!();
    let dir = temp_dir("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    // A path below a regular file cannot be made, whoever runs the test (root included).
    let blocked = dir.join("a-file");
    std::fs::write(&blocked, b"not a directory").unwrap();
    let long = prompt(300, 4);
    let cold = run(&mut engine(KvCacheDtype::Auto, None), &long, 6);
    let mut degraded = engine(KvCacheDtype::Auto, Some(&offload(&blocked.join("kv"), 1)));
    assert_eq!(run(&mut degraded, &long, 6), cold);
    // The RAM tier still serves the repeat.
    assert_eq!(run(&mut degraded, &long, 6), cold);
    assert_eq!(
        degraded.stats().prefix_cache_hits,
        (long.len() - 1) as u64 / 16 * 16
    );
    assert_eq!(degraded.kv_offload_stats().unwrap().blocks_written, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

const CRASH_CHILD: &str = "TOKENMILL_KV_OFFLOAD_CRASH_CHILD";
/// Which kill the child is for: each writes tails of its own, so there is always new work.
const CRASH_ROUND: &str = "TOKENMILL_KV_OFFLOAD_CRASH_ROUND";
const CRASH_TEST: &str = "a_process_killed_while_offloading_leaves_no_wrong_answer_behind";

/// Prompts sharing a prefix, as a system prompt does: several chains of blocks, some shared.
fn crash_prompts() -> Vec<Vec<u32>> {
    let shared = prompt(160, 9);
    (0..4)
        .map(|salt| [shared.clone(), prompt(150 + 16 * salt, 20 + salt)].concat())
        .collect()
}

/// The kill -9 test, short (three kills); `scripts/kv-offload-crash.sh` runs the server
/// version under load fifty times. The child (this test rerun with `CRASH_CHILD` set) serves
/// the prompts in a loop while writing through; the parent kills it once blocks are being
/// written, then checks a restarted engine's answers against cold runs.
#[test]
fn a_process_killed_while_offloading_leaves_no_wrong_answer_behind() {
    common::skip_without_model!();
    if let Ok(dir) = std::env::var(CRASH_CHILD) {
        let mut child = engine(KvCacheDtype::Auto, Some(&offload(Path::new(&dir), 1)));
        let salt: usize = std::env::var(CRASH_ROUND).map_or(0, |r| r.parse().unwrap_or(0));
        for round in 0..50 {
            for (i, p) in crash_prompts().iter().enumerate() {
                // New tails each round keep the writer busy.
                let tail = prompt(48, 1000 * (salt + 1) + round * 10 + i);
                run(&mut child, &[p.clone(), tail].concat(), 2);
            }
        }
        return;
    }
    let dir = temp_dir("crash");
    let prompts = crash_prompts();
    let mut cold_engine = engine(KvCacheDtype::Auto, None);
    let cold: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| run(&mut cold_engine, p, 8))
        .collect();
    drop(cold_engine);
    for kill in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg(common::libtest_name(module_path!(), CRASH_TEST))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .env(CRASH_CHILD, &dir)
            .env(CRASH_ROUND, kill.to_string())
            .spawn()
            .unwrap();
        // Wait for the writer to be at work, then kill at a different moment each time.
        let start = Instant::now();
        let before = block_files(&dir).len();
        while block_files(&dir).len() <= before + 2 && start.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(37 * kill as u64));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut restarted = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
        for (p, want) in prompts.iter().zip(&cold) {
            assert_eq!(&run(&mut restarted, p, 8), want, "after kill {kill}");
        }
        assert!(restarted.stats().disk_cache_hits > 0, "after kill {kill}");
        assert_eq!(restarted.kv_offload_stats().unwrap().bad_files, 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn blocks_written_to_disk_are_announced_as_disk_tier_events() {
    use std::sync::{Arc, Mutex};
    use tokenmill_engine::kv::kv_event::KvEvent;
    common::skip_without_model!();
    let dir = temp_dir("events");
    let long = prompt(200, 5);
    let mut engine = engine(KvCacheDtype::Auto, Some(&offload(&dir, 1)));
    let seen: Arc<Mutex<Vec<KvEvent>>> = Arc::default();
    let sink = Arc::clone(&seen);
    engine.set_kv_event_sink(Box::new(move |events| sink.lock().unwrap().extend(events)));
    run(&mut engine, &long, 2);
    engine.flush_kv_offload();
    // Events go out once per step: one more request's steps carry the writer's report.
    run(&mut engine, &prompt(20, 6), 1);
    let on_disk: Vec<u64> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            KvEvent::BlockStoredOnDisk { block_hashes, .. } => Some(block_hashes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let want: Vec<u64> = BlockHash::of_full_blocks(&long, BLOCK)
        .iter()
        .map(BlockHash::external)
        .collect();
    assert_eq!(on_disk, want);
    let _ = std::fs::remove_dir_all(&dir);
}
