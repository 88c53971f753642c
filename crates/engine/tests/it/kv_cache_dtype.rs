//! `--kv-cache-dtype`: the pool sized from `--kv-cache-memory-gib` counts the element size,
//! so the default f16 cache holds twice the tokens of f32 in the same memory, `q8_0`
//! (34 bytes per 32 values) 1.88 times f16's and `fp8` (66 bytes per head of 64) 1.94
//! times; what each type stores, written in parallel or row by row, and kept through the
//! idle engine's page backing.

use crate::common;

use tokenmill_engine::config::KvCacheDtype;
use tokenmill_engine::EngineConfig;

const DTYPES: [KvCacheDtype; 5] = [
    KvCacheDtype::F32,
    KvCacheDtype::F16,
    KvCacheDtype::Bf16,
    KvCacheDtype::Q8_0,
    KvCacheDtype::Fp8,
];

/// The dtypes that can store heads of `head_dim` (a block format needs whole blocks).
fn dtypes_for(head_dim: usize) -> impl Iterator<Item = KvCacheDtype> {
    DTYPES
        .into_iter()
        .filter(move |d| d.block_values().is_none_or(|b| head_dim.is_multiple_of(b)))
}

#[test]
fn the_f16_cache_holds_twice_the_tokens_of_an_f32_cache_in_the_same_memory() {
    crate::common::skip_without_model!();
    let memory = 64 << 20;
    let blocks = |kv| {
        let engine = common::load_engine(EngineConfig {
            kv_cache_memory_bytes: memory,
            kv_cache_dtype: kv,
            max_model_len: Some(1024),
            ..EngineConfig::default()
        });
        let c = engine.model_config();
        let per_block = c.kv_bytes_per_token(kv) * engine.limits().block_size;
        assert_eq!(engine.limits().num_kv_blocks, memory / per_block);
        engine.limits().num_kv_blocks
    };
    let (f32_blocks, f16_blocks, auto_blocks, bf16_blocks, q8_blocks, fp8_blocks) = (
        blocks(KvCacheDtype::F32),
        blocks(KvCacheDtype::F16),
        blocks(KvCacheDtype::Auto),
        blocks(KvCacheDtype::Bf16),
        blocks(KvCacheDtype::Q8_0),
        blocks(KvCacheDtype::Fp8),
    );
    assert!(f16_blocks >= 2 * f32_blocks && f16_blocks <= 2 * f32_blocks + 1);
    assert_eq!(auto_blocks, f16_blocks, "auto is f16");
    assert_eq!(bf16_blocks, f16_blocks);
    // 34 bytes per 32 values against 64: 1.88 times the blocks, to within one.
    assert!(
        q8_blocks * 34 + 34 >= f16_blocks * 64 && q8_blocks * 34 <= (f16_blocks + 1) * 64,
        "q8_0 holds {q8_blocks} blocks where f16 holds {f16_blocks}: not 64/34 times"
    );
    // SmolLM2's head dim is 64: 66 bytes per head's row against 128, to within one block.
    assert!(
        fp8_blocks * 66 + 66 >= f16_blocks * 128 && fp8_blocks * 66 <= (f16_blocks + 1) * 128,
        "fp8 holds {fp8_blocks} blocks where f16 holds {f16_blocks}: not 128/66 times"
    );
}

/// `fp8` has no block rule: any head dim is served (one scale per head's row).
#[test]
fn fp8_takes_a_head_dim_that_is_not_a_multiple_of_32() {
    use tokenmill_engine::config::model_config::ModelConfig;
    let mut model = ModelConfig::smollm2_135m();
    model.head_dim = 48;
    let config = EngineConfig {
        kv_cache_dtype: KvCacheDtype::Fp8,
        ..EngineConfig::default()
    };
    assert!(config.plan(&model).is_ok());
    assert_eq!(KvCacheDtype::Fp8.bytes_for(3 * 48, 48), 3 * 50);
}

/// Every e4m3 code comes back from its own value and from its f16 image (the fold's
/// widening): `f16_bits` times 2^8 is the value, subnormals and signed zeros included; a
/// value halfway between two codes rounds to the one with the even mantissa; magnitudes at
/// and past 448 saturate to ±448 and NaN gives zero, so no NaN code is ever made.
#[test]
fn e4m3_codes_round_trip_and_round_to_nearest_even() {
    use half::f16;
    use tokenmill_engine::kv::fp8_slab::E4m3;
    use tokenmill_engine::kv::scaled_slab::Code;
    // The finite codes in increasing magnitude (0x7f, 0xff are NaN in e4m3fn).
    let magnitudes: Vec<u8> = (0..0x7f).collect();
    for sign in [0u8, 0x80] {
        for &m in &magnitudes {
            let code = E4m3(sign | m);
            let v = code.value();
            let (e, mant) = ((m >> 3) as i32, (m & 7) as f32);
            let want = if e == 0 {
                mant / 512.0
            } else {
                (1.0 + mant / 8.0) * 2f32.powi(e - 7)
            };
            let want = if sign != 0 { -want } else { want };
            assert_eq!(v.to_bits(), want.to_bits(), "code {:#04x}", code.0);
            assert_eq!(E4m3::from_f32(v), code, "{v} back to its code");
            let image = f16::from_bits(code.f16_bits()).to_f32() * 256.0;
            assert_eq!(
                image.to_bits(),
                v.to_bits(),
                "code {:#04x}'s f16 image",
                code.0
            );
        }
        for pair in magnitudes.windows(2) {
            let (lo, hi) = (E4m3(sign | pair[0]), E4m3(sign | pair[1]));
            let mid = (lo.value() + hi.value()) / 2.0;
            let even = if pair[0] & 1 == 0 { lo } else { hi };
            assert_eq!(E4m3::from_f32(mid), even, "{mid} halfway");
            // Just off the midpoint (one ulp smaller or larger in magnitude), the nearer one.
            let near_lo = f32::from_bits(mid.to_bits() - 1);
            let near_hi = f32::from_bits(mid.to_bits() + 1);
            assert_eq!(
                E4m3::from_f32(near_lo),
                lo,
                "{near_lo} just inside {}",
                lo.value()
            );
            assert_eq!(
                E4m3::from_f32(near_hi),
                hi,
                "{near_hi} just inside {}",
                hi.value()
            );
        }
    }
    for (x, want) in [
        (448.0, 0x7e),
        (464.0, 0x7e),
        (1e30, 0x7e),
        (f32::INFINITY, 0x7e),
        (-500.0, 0xfe),
        (f32::NAN, 0x00),
        (1e-9, 0x00),
        (-1e-9, 0x80),
    ] {
        assert_eq!(E4m3::from_f32(x), E4m3(want), "{x}");
    }
}

/// `fp8` keeps each head's row of a token as e4m3 codes times one f16 scale, the row's
/// largest magnitude over 448: every value comes back within half an e4m3 step of it (3
/// mantissa bits: 1/16 relative, 2^-10 of the scale in the subnormals), the largest
/// exactly at 448 scales; a zero row reads zeros, and a row beyond f16's range stays finite.
/// Head dims of 64 and 48 (no block rule) and 256 (gemma-3: past one write task's columns).
#[test]
fn the_fp8_cache_keeps_each_rows_values_within_half_an_e4m3_step() {
    use half::f16;
    use tokenmill_engine::config::model_config::KvHeads;
    use tokenmill_engine::kv::kv_cache::KvCache;
    for head_dim in [64, 48, 256] {
        let heads = KvHeads {
            num_kv_heads: 2,
            head_dim,
        };
        let (bs, width) = (16, heads.width());
        let mut rows: Vec<Vec<f32>> = (0..5)
            .map(|r| {
                (0..width)
                    .map(|e| ((r * 131 + e * 17) % 257) as f32 * 0.031 - 4.0)
                    .collect()
            })
            .collect();
        // A zero row, one value among zeros, values past f16's largest, and a row of
        // small values that fall in e4m3's subnormals against the row's largest.
        rows[1][..head_dim].fill(0.0);
        rows[2][head_dim..].fill(0.0);
        rows[2][head_dim + 5] = 0.5;
        rows[3][head_dim..].iter_mut().for_each(|x| *x *= 1e7);
        rows[4][..head_dim].iter_mut().for_each(|x| *x *= 1e-5);
        rows[4][3] = 9.0;
        let slots = [0, 5, 17, 18, 31];
        let mut cache = KvCache::new(1, 2, bs, heads, KvCacheDtype::Fp8);
        cache.write(0, &slots, &rows.concat(), &rows.concat());
        let mut got = vec![0f32; width];
        for (row, &slot) in rows.iter().zip(&slots) {
            for key in [true, false] {
                if key {
                    cache.layer(0).key_row(slot, &mut got);
                } else {
                    cache.layer(0).value_row(slot, &mut got);
                }
                for (h, (want, got)) in row.chunks(head_dim).zip(got.chunks(head_dim)).enumerate() {
                    let amax = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let scale = f16::from_f32(amax / 448.0).to_f32().min(f16::MAX.to_f32());
                    for (x, y) in want.iter().zip(got) {
                        assert!(y.is_finite(), "slot {slot} head {h}: {x} read as {y}");
                        let m = x.abs() / scale.max(f32::MIN_POSITIVE);
                        let half_step = if m < 1.0 / 64.0 {
                            scale / 1024.0
                        } else {
                            scale * 2f32.powi(m.log2().floor() as i32 - 4)
                        };
                        let limit = if m > 448.0 {
                            // Past the scale (f16's range, or its rounding): clamped.
                            (x.abs() - 448.0 * scale).max(half_step)
                        } else {
                            half_step
                        };
                        assert!(
                            (x - y).abs() <= limit * 1.0001,
                            "head dim {head_dim} slot {slot} head {h} (key {key}): {x} read \
                             as {y}, scale {scale}"
                        );
                    }
                    if amax > 0.0 && scale * 448.0 >= amax {
                        let top = got.iter().fold(0f32, |m, y| m.max(y.abs()));
                        assert_eq!(top, 448.0 * scale, "slot {slot} head {h}: the largest");
                    }
                }
            }
        }
    }
}

/// A model whose head dim is not a whole number of `q8_0` blocks is refused at startup,
/// naming the flag, not discovered by a request.
#[test]
fn q8_0_is_refused_by_name_for_a_head_dim_that_is_not_a_multiple_of_32() {
    use tokenmill_engine::config::model_config::ModelConfig;
    let mut model = ModelConfig::smollm2_135m();
    let config = EngineConfig {
        kv_cache_dtype: KvCacheDtype::Q8_0,
        ..EngineConfig::default()
    };
    assert!(config.plan(&model).is_ok(), "SmolLM2's head dim is 64");
    model.head_dim = 48;
    let err = config.plan(&model).unwrap_err();
    assert_eq!(err.flag(), "--kv-cache-dtype");
    assert!(err.to_string().contains("48"), "{err}");
}

/// `q8_0` keeps each block of 32 values as int8s times one f16 scale: the scale is the
/// block's largest magnitude over 127, so every value comes back within half a step, the
/// largest exactly at ±127 steps; a zero block reads zeros, and a block beyond f16's range
/// stays finite.
#[test]
fn the_q8_0_cache_keeps_each_block_within_half_a_step_of_its_values() {
    use half::f16;
    use tokenmill_engine::config::model_config::KvHeads;
    use tokenmill_engine::kv::kv_cache::KvCache;
    let heads = KvHeads {
        num_kv_heads: 2,
        head_dim: 64,
    };
    let (bs, width) = (16, heads.width());
    let mut rows: Vec<Vec<f32>> = (0..5)
        .map(|r| {
            (0..width)
                .map(|e| ((r * 131 + e * 17) % 257) as f32 * 0.031 - 4.0)
                .collect()
        })
        .collect();
    // Blocks of zeros, of one value among zeros, and of values past f16's largest.
    rows[1][..32].fill(0.0);
    rows[2][32..64].fill(0.0);
    rows[2][40] = 0.5;
    rows[3][64..96].iter_mut().for_each(|x| *x *= 1e7);
    let slots = [0, 5, 17, 18, 31];
    let mut cache = KvCache::new(1, 2, bs, heads, KvCacheDtype::Q8_0);
    cache.write(0, &slots, &rows.concat(), &rows.concat());
    let mut got = vec![0f32; width];
    for (row, &slot) in rows.iter().zip(&slots) {
        for key in [true, false] {
            if key {
                cache.layer(0).key_row(slot, &mut got);
            } else {
                cache.layer(0).value_row(slot, &mut got);
            }
            for (b, (want, got)) in row.chunks(32).zip(got.chunks(32)).enumerate() {
                let amax = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                let step = f16::from_f32(amax / 127.0).to_f32().min(f16::MAX.to_f32());
                for (x, y) in want.iter().zip(got) {
                    assert!(y.is_finite(), "slot {slot} block {b}: {x} read as {y}");
                    let limit = if step * 127.0 < amax {
                        // Past f16's range: clamped at ±127 steps.
                        (x.abs() - 127.0 * step).max(step / 2.0)
                    } else {
                        step / 2.0
                    };
                    assert!(
                        (x - y).abs() <= limit * 1.0001,
                        "slot {slot} block {b} (key {key}): {x} read as {y}, step {step}"
                    );
                }
                if amax > 0.0 && step * 127.0 >= amax {
                    let top = got.iter().fold(0f32, |m, y| m.max(y.abs()));
                    assert_eq!(top, 127.0 * step, "slot {slot} block {b}: the largest");
                }
            }
        }
    }
}

#[test]
fn the_dtype_flag_parses_vllms_spellings() {
    for (s, want) in [
        ("auto", KvCacheDtype::Auto),
        ("f32", KvCacheDtype::F32),
        ("float16", KvCacheDtype::F16),
        ("bf16", KvCacheDtype::Bf16),
        ("q8_0", KvCacheDtype::Q8_0),
        ("fp8", KvCacheDtype::Fp8),
        ("fp8_e4m3", KvCacheDtype::Fp8),
    ] {
        assert_eq!(s.parse::<KvCacheDtype>().unwrap(), want);
    }
    assert!("fp8_e5m2".parse::<KvCacheDtype>().is_err());
    assert_eq!(KvCacheDtype::Fp8.to_string(), "fp8");
    assert_eq!(KvCacheDtype::Auto.resolve(), KvCacheDtype::F16);
}

/// A prefill-sized write runs on the compute pool, element range by element range; a row at
/// a time it stays on one thread. Both store the same bits in every slot, keys transposed.
#[test]
fn a_parallel_write_of_many_rows_stores_what_row_by_row_writes_store() {
    use tokenmill_engine::config::model_config::KvHeads;
    // Qwen3-0.6B's heads, and heads of 48 and 96 whose ends fall inside a task's columns.
    for (num_kv_heads, head_dim) in [(8, 128), (7, 48), (3, 96)] {
        let heads = KvHeads {
            num_kv_heads,
            head_dim,
        };
        write_in_parallel_and_row_by_row(heads);
    }
}

fn write_in_parallel_and_row_by_row(heads: tokenmill_engine::config::model_config::KvHeads) {
    use tokenmill_engine::kv::kv_cache::KvCache;
    let (bs, width, rows) = (16, heads.width(), 40);
    // Scattered slots over several blocks, partly filled ones too, as a batch's are.
    let slots: Vec<usize> = (0..rows).map(|r| (r * 7) % (6 * bs) + bs).collect();
    let value = |r: usize, e: usize, kind: f32| ((r * 31 + e * 17) % 997) as f32 * kind - 3.3;
    let keys: Vec<f32> = (0..rows * width)
        .map(|i| value(i / width, i % width, 0.011))
        .collect();
    let values: Vec<f32> = (0..rows * width)
        .map(|i| value(i / width, i % width, -0.007))
        .collect();
    for dtype in dtypes_for(heads.head_dim) {
        let (mut together, mut alone) = (
            KvCache::new(1, 8, bs, heads, dtype),
            KvCache::new(1, 8, bs, heads, dtype),
        );
        together.write(0, &slots, &keys, &values);
        for (r, &slot) in slots.iter().enumerate() {
            let row = r * width..(r + 1) * width;
            alone.write(0, &[slot], &keys[row.clone()], &values[row]);
        }
        let (mut a, mut b) = (vec![0f32; width], vec![0f32; width]);
        if dtype == KvCacheDtype::F32 {
            for (r, &slot) in slots.iter().enumerate() {
                together.layer(0).key_row(slot, &mut a);
                assert_eq!(a, keys[r * width..(r + 1) * width], "key of row {r}");
                together.layer(0).value_row(slot, &mut a);
                assert_eq!(a, values[r * width..(r + 1) * width], "value of row {r}");
            }
        }
        for slot in 0..8 * bs {
            together.layer(0).key_row(slot, &mut a);
            alone.layer(0).key_row(slot, &mut b);
            assert_eq!(a, b, "{dtype:?} key of slot {slot}");
            together.layer(0).value_row(slot, &mut a);
            alone.layer(0).value_row(slot, &mut b);
            assert_eq!(a, b, "{dtype:?} value of slot {slot}");
        }
    }
}

/// The f16 cache rounds each value as `half` does (to nearest, ties to even): subnormals,
/// halfway cases, overflow to infinity, signed zeros and NaN, in rows whose width leaves a
/// tail past the eight-wide conversion.
#[test]
fn the_f16_cache_rounds_every_value_as_half_does() {
    use half::f16;
    use tokenmill_engine::config::model_config::KvHeads;
    use tokenmill_engine::kv::kv_cache::KvCache;
    let heads = KvHeads {
        num_kv_heads: 3,
        head_dim: 12,
    };
    let (bs, width) = (16, heads.width());
    let specials = [
        0.0,
        -0.0,
        1.0 + f32::EPSILON,
        1.000_488_3, // halfway between two f16 values: rounds to even
        1.001_464_8, // halfway, rounds up to even
        65_504.0,    // f16's largest
        65_520.0,    // rounds to infinity
        -1e9,        // overflows
        6.0e-8,      // f16 subnormal range
        -3.0e-5,     // subnormal
        1e-10,       // underflows to zero
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
    ];
    let mut values: Vec<f32> = specials.to_vec();
    // Then a sweep of ordinary values with many low mantissa bits set.
    values.extend((0..3 * width).map(|i| (i as f32 * 0.618_034).sin() * 1_000.0 / (1 + i) as f32));
    let rows = values.len() / width;
    let values = &values[..rows * width];
    let slots: Vec<usize> = (0..rows).collect();
    let mut cache = KvCache::new(1, 1 + rows / bs, bs, heads, KvCacheDtype::F16);
    cache.write(0, &slots, values, values);
    let mut got = vec![0f32; width];
    for (r, want) in values.chunks_exact(width).enumerate() {
        for (kind, read) in [("key", true), ("value", false)] {
            if read {
                cache.layer(0).key_row(r, &mut got);
            } else {
                cache.layer(0).value_row(r, &mut got);
            }
            for (e, (&g, &x)) in got.iter().zip(want).enumerate() {
                let h = f16::from_f32(x).to_f32();
                assert!(
                    g.to_bits() == h.to_bits() || (g.is_nan() && h.is_nan()),
                    "{kind} row {r} element {e}: {x:e} stored as {g:e}, half gives {h:e}"
                );
            }
        }
    }
}

/// The idle engine backs the pool's pages by reading and writing back one byte a page;
/// every stored key and value must come through unchanged (cached prefixes live in free
/// blocks), and the walk must end once every slab of every block is done.
#[test]
fn backing_the_pools_pages_changes_no_stored_value_and_ends() {
    use tokenmill_engine::config::model_config::KvHeads;
    use tokenmill_engine::kv::kv_cache::KvCache;
    // Qwen3's heads (a block's share of a slab is 8 pages), and odd ones (not whole pages).
    for (num_kv_heads, head_dim, blocks) in [(8, 128, 40), (3, 40, 300)] {
        let heads = KvHeads {
            num_kv_heads,
            head_dim,
        };
        let (bs, width, layers) = (16, heads.width(), 3);
        let slots: Vec<usize> = (0..blocks * bs).collect();
        let fill = |layer: usize, kind: usize| -> Vec<f32> {
            (0..slots.len() * width)
                .map(|i| ((i * 37 + layer * 101 + kind * 7) % 1_009) as f32 * 0.013 - 6.5)
                .collect()
        };
        for dtype in dtypes_for(head_dim) {
            let mut kv = KvCache::new(layers, blocks, bs, heads, dtype);
            for layer in 0..layers {
                kv.write(layer, &slots, &fill(layer, 0), &fill(layer, 1));
            }
            let rows = |kv: &KvCache| -> Vec<Vec<u32>> {
                let mut row = vec![0f32; width];
                let mut out = Vec::new();
                for layer in 0..layers {
                    for &slot in &slots {
                        kv.layer(layer).key_row(slot, &mut row);
                        out.push(row.iter().map(|x| x.to_bits()).collect());
                        kv.layer(layer).value_row(slot, &mut row);
                        out.push(row.iter().map(|x| x.to_bits()).collect());
                    }
                }
                out
            };
            let before = rows(&kv);
            let mut calls = 1;
            while kv.fault_in_next() {
                calls += 1;
                assert!(
                    calls <= 2 * layers * blocks,
                    "{dtype:?}: the walk does not end"
                );
            }
            assert!(calls >= 2 * layers, "{dtype:?}: every slab is visited");
            assert!(
                !kv.fault_in_next(),
                "{dtype:?}: a finished walk stays finished"
            );
            assert!(rows(&kv) == before, "{dtype:?}: a stored value changed");
        }
    }
}
