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
//! With `"event_encoding": "map"` in `--kv-events-config` each event is instead a map tagged
//! by `"type"`, `BlockStored` with a nil `lora_name` besides its fields: the only form
//! vllm-router 0.1.17's `kv_aware` policy decodes (the batch stays an array).
//!
//! ```text
//! {"type": "BlockStored", "block_hashes": [..], "parent_block_hash": h, "token_ids": [..],
//!  "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
//! {"type": "BlockRemoved", "block_hashes": [..], "medium": "GPU"}
//! {"type": "AllBlocksCleared"}
//! ```
//!
//! Hashes are unsigned 64-bit integers (vLLM's default int form of its block hashes),
//! `lora_id` is nil (no adapters), and `medium` is `"GPU"`: vLLM's name for the engine's own
//! KV pool, the one requests compute from (tokenmill's lives in host memory). The disk
//! tier's blocks (`--kv-offload-dir`), stored and deleted, are the same events with
//! `medium` `"DISK"`.

use std::io;

use rmp::encode;
use tokenmill_engine::KvEvent;

use crate::kv_events::kv_events_config::EventEncoding;

/// vLLM's `medium` for the engine's own KV pool (its `MEDIUM_GPU`).
pub const MEDIUM: &str = "GPU";

/// The `medium` of blocks in the disk tier (`--kv-offload-dir`; vLLM names its offloading
/// connector's tiers by where they live, as `CPU`).
pub const MEDIUM_DISK: &str = "DISK";

/// The medium an event's blocks live in.
fn medium_of(event: &KvEvent) -> &'static str {
    match event {
        KvEvent::BlockStoredOnDisk { .. } | KvEvent::BlockRemovedFromDisk { .. } => MEDIUM_DISK,
        _ => MEDIUM,
    }
}

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
    /// The MessagePack payload (the third frame of a published message), vLLM's form.
    pub fn encode(&self) -> io::Result<Vec<u8>> {
        self.encode_as(EventEncoding::Array)
    }

    /// The payload with each event written as `encoding` says.
    pub fn encode_as(&self, encoding: EventEncoding) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64 + 16 * self.events.len());
        array(&mut out, 3)?;
        encode::write_f64(&mut out, self.ts).map_err(io::Error::other)?;
        array(&mut out, self.events.len())?;
        for event in &self.events {
            match encoding {
                EventEncoding::Array => write_event(&mut out, event)?,
                EventEncoding::Map => write_event_map(&mut out, event)?,
            }
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
        }
        | KvEvent::BlockStoredOnDisk {
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
            text(out, medium_of(event))
        }
        KvEvent::BlockRemoved { block_hashes } | KvEvent::BlockRemovedFromDisk { block_hashes } => {
            array(out, 3)?;
            text(out, "BlockRemoved")?;
            uints(out, block_hashes.iter().copied())?;
            text(out, medium_of(event))
        }
        KvEvent::AllBlocksCleared => {
            array(out, 1)?;
            text(out, "AllBlocksCleared")
        }
    }
}

fn write_event_map(out: &mut Vec<u8>, event: &KvEvent) -> io::Result<()> {
    match event {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
        }
        | KvEvent::BlockStoredOnDisk {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
        } => {
            map(out, 8)?;
            pair(out, "type", |out| text(out, "BlockStored"))?;
            pair(out, "block_hashes", |out| {
                uints(out, block_hashes.iter().copied())
            })?;
            pair(out, "parent_block_hash", |out| match parent_block_hash {
                Some(parent) => uint(out, *parent),
                None => nil(out),
            })?;
            pair(out, "token_ids", |out| {
                uints(out, token_ids.iter().map(|&t| u64::from(t)))
            })?;
            pair(out, "block_size", |out| uint(out, *block_size as u64))?;
            pair(out, "lora_id", nil)?;
            pair(out, "medium", |out| text(out, medium_of(event)))?;
            pair(out, "lora_name", nil)
        }
        KvEvent::BlockRemoved { block_hashes } | KvEvent::BlockRemovedFromDisk { block_hashes } => {
            map(out, 3)?;
            pair(out, "type", |out| text(out, "BlockRemoved"))?;
            pair(out, "block_hashes", |out| {
                uints(out, block_hashes.iter().copied())
            })?;
            pair(out, "medium", |out| text(out, medium_of(event)))
        }
        KvEvent::AllBlocksCleared => {
            map(out, 1)?;
            pair(out, "type", |out| text(out, "AllBlocksCleared"))
        }
    }
}

fn map(out: &mut Vec<u8>, len: u32) -> io::Result<()> {
    encode::write_map_len(out, len).map_err(io::Error::other)?;
    Ok(())
}

fn pair(
    out: &mut Vec<u8>,
    key: &str,
    value: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
) -> io::Result<()> {
    text(out, key)?;
    value(out)
}

fn nil(out: &mut Vec<u8>) -> io::Result<()> {
    encode::write_nil(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn str_bytes(s: &str) -> Vec<u8> {
        let mut out = vec![0xa0 | s.len() as u8];
        out.extend_from_slice(s.as_bytes());
        out
    }

    #[test]
    fn map_encoding_tags_each_event_and_names_lora_name() {
        let batch = KvEventBatch {
            ts: 1.5,
            events: vec![
                KvEvent::AllBlocksCleared,
                KvEvent::BlockStored {
                    block_hashes: vec![7],
                    parent_block_hash: None,
                    token_ids: vec![1, 2],
                    block_size: 2,
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![7],
                },
            ],
            data_parallel_rank: Some(0),
        };
        let got = batch.encode_as(EventEncoding::Map).unwrap();
        let mut want = vec![0x93, 0xcb];
        want.extend_from_slice(&1.5f64.to_be_bytes());
        want.push(0x93);
        // {"type": "AllBlocksCleared"}
        want.push(0x81);
        want.extend(str_bytes("type"));
        want.extend(str_bytes("AllBlocksCleared"));
        // BlockStored: 8 keys, lora_name last.
        want.push(0x88);
        for (key, value) in [
            ("type", str_bytes("BlockStored")),
            ("block_hashes", vec![0x91, 7]),
            ("parent_block_hash", vec![0xc0]),
            ("token_ids", vec![0x92, 1, 2]),
            ("block_size", vec![2]),
            ("lora_id", vec![0xc0]),
            ("medium", str_bytes("GPU")),
            ("lora_name", vec![0xc0]),
        ] {
            want.extend(str_bytes(key));
            want.extend(value);
        }
        want.push(0x83);
        for (key, value) in [
            ("type", str_bytes("BlockRemoved")),
            ("block_hashes", vec![0x91, 7]),
            ("medium", str_bytes("GPU")),
        ] {
            want.extend(str_bytes(key));
            want.extend(value);
        }
        want.push(0);
        assert_eq!(got, want);
    }

    #[test]
    fn array_encoding_is_the_default() {
        let batch = KvEventBatch {
            ts: 0.0,
            events: vec![KvEvent::AllBlocksCleared],
            data_parallel_rank: Some(0),
        };
        assert_eq!(
            batch.encode().unwrap(),
            batch.encode_as(EventEncoding::Array).unwrap()
        );
        let mut want = vec![0x93, 0xcb];
        want.extend_from_slice(&0.0f64.to_be_bytes());
        want.extend([0x91, 0x91]);
        want.extend(str_bytes("AllBlocksCleared"));
        want.push(0);
        assert_eq!(batch.encode().unwrap(), want);
    }

    #[test]
    fn a_disk_tier_block_is_a_block_stored_event_with_medium_disk() {
        let stored = |event: KvEvent| KvEventBatch {
            ts: 0.0,
            events: vec![event],
            data_parallel_rank: Some(0),
        };
        let (hashes, tokens) = (vec![7], vec![1, 2]);
        let ram = stored(KvEvent::BlockStored {
            block_hashes: hashes.clone(),
            parent_block_hash: None,
            token_ids: tokens.clone(),
            block_size: 2,
        });
        let disk = stored(KvEvent::BlockStoredOnDisk {
            block_hashes: hashes,
            parent_block_hash: None,
            token_ids: tokens,
            block_size: 2,
        });
        assert_only_the_medium_differs(&ram, &disk);
    }

    /// In both encodings, `disk` encodes as `ram` does but for the medium: "GPU" (a fixstr
    /// of 3) becomes "DISK".
    fn assert_only_the_medium_differs(ram: &KvEventBatch, disk: &KvEventBatch) {
        for encoding in [EventEncoding::Array, EventEncoding::Map] {
            let (ram, disk) = (
                ram.encode_as(encoding).unwrap(),
                disk.encode_as(encoding).unwrap(),
            );
            let gpu = str_bytes("GPU");
            let at = ram.windows(gpu.len()).position(|w| w == gpu).unwrap();
            let mut want = ram[..at].to_vec();
            want.extend(str_bytes("DISK"));
            want.extend_from_slice(&ram[at + gpu.len()..]);
            assert_eq!(disk, want, "{encoding:?}");
        }
    }

    #[test]
    fn a_disk_tier_deletion_is_a_block_removed_event_with_medium_disk() {
        let one = |event: KvEvent| KvEventBatch {
            ts: 0.0,
            events: vec![event],
            data_parallel_rank: Some(0),
        };
        let ram = one(KvEvent::BlockRemoved {
            block_hashes: vec![7, 9],
        });
        let disk = one(KvEvent::BlockRemovedFromDisk {
            block_hashes: vec![7, 9],
        });
        assert_only_the_medium_differs(&ram, &disk);
    }
}
