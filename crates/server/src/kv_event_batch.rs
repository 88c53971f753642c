//! `KvEventBatch`: one engine step's KV-cache events, written as vLLM writes its
//! `KvEventBatch`: msgspec structs with `array_like=True`, so each is a MessagePack array of
//! its fields in order, and events `tag=True`, so each array opens with the class name.
//!
//! ```text
//! [ts, [event, ...], data_parallel_rank]
//! ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]
//! ["BlockRemoved", block_hashes, medium]
//! ["AllBlocksCleared"]
//! ```
//!
//! Hashes are unsigned 64-bit integers (vLLM's default int form of its block hashes),
//! `lora_id` is nil (no adapters), and `medium` is `"GPU"`: vLLM's name for the engine's own
//! KV pool, the one requests compute from (tokenmill's lives in host memory).

use std::io;

use rmp::encode;
use tokenmill_engine::KvEvent;

/// vLLM's `medium` for the engine's own KV pool (its `MEDIUM_GPU`).
pub const MEDIUM: &str = "GPU";

/// One step's events as published.
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventBatch {
    /// Unix time in seconds when the step's events were taken.
    pub ts: f64,
    pub events: Vec<KvEvent>,
    /// vLLM's data-parallel rank; one engine is rank 0.
    pub data_parallel_rank: Option<u32>,
}

impl KvEventBatch {
    /// The MessagePack payload (the third frame of a published message).
    pub fn encode(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64 + 16 * self.events.len());
        array(&mut out, 3)?;
        encode::write_f64(&mut out, self.ts).map_err(io::Error::other)?;
        array(&mut out, self.events.len())?;
        for event in &self.events {
            write_event(&mut out, event)?;
        }
        match self.data_parallel_rank {
            Some(rank) => uint(&mut out, u64::from(rank))?,
            None => encode::write_nil(&mut out)?,
        }
        Ok(out)
    }
}

fn write_event(out: &mut Vec<u8>, event: &KvEvent) -> io::Result<()> {
    match event {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
        } => {
            array(out, 7)?;
            text(out, "BlockStored")?;
            uints(out, block_hashes.iter().copied())?;
            match parent_block_hash {
                Some(parent) => uint(out, *parent)?,
                None => encode::write_nil(out)?,
            }
            uints(out, token_ids.iter().map(|&t| u64::from(t)))?;
            uint(out, *block_size as u64)?;
            encode::write_nil(out)?; // lora_id
            text(out, MEDIUM)
        }
        KvEvent::BlockRemoved { block_hashes } => {
            array(out, 3)?;
            text(out, "BlockRemoved")?;
            uints(out, block_hashes.iter().copied())?;
            text(out, MEDIUM)
        }
        KvEvent::AllBlocksCleared => {
            array(out, 1)?;
            text(out, "AllBlocksCleared")
        }
    }
}

fn array(out: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let len = u32::try_from(len).map_err(io::Error::other)?;
    encode::write_array_len(out, len).map_err(io::Error::other)?;
    Ok(())
}

fn uints(out: &mut Vec<u8>, values: impl ExactSizeIterator<Item = u64>) -> io::Result<()> {
    array(out, values.len())?;
    for v in values {
        uint(out, v)?;
    }
    Ok(())
}

fn uint(out: &mut Vec<u8>, value: u64) -> io::Result<()> {
    encode::write_uint(out, value).map_err(io::Error::other)?;
    Ok(())
}

fn text(out: &mut Vec<u8>, value: &str) -> io::Result<()> {
    encode::write_str(out, value).map_err(io::Error::other)
}
