//! `KvCache`: the paged key/value storage, one pair of slabs per layer.
//!
//! Slot `s` (`block * block_size + offset`) holds one token's keys for every KV head,
//! `[num_kv_heads * head_dim]` contiguous, so a head's key is one short contiguous read.

pub struct KvCache {
    block_size: usize,
    /// `num_kv_heads * head_dim`
    width: usize,
    layers: Vec<KvLayer>,
}

pub struct KvLayer {
    /// `[num_blocks * block_size, width]`
    pub keys: Vec<f32>,
    pub values: Vec<f32>,
}

impl KvCache {
    pub fn new(num_layers: usize, num_blocks: usize, block_size: usize, width: usize) -> Self {
        let slab = num_blocks * block_size * width;
        let layers = (0..num_layers)
            .map(|_| KvLayer {
                keys: vec![0.0; slab],
                values: vec![0.0; slab],
            })
            .collect();
        Self {
            block_size,
            width,
            layers,
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn layer(&self, layer: usize) -> &KvLayer {
        &self.layers[layer]
    }

    /// Stores rows of `keys`/`values` (`[T, width]`) at `slots[T]`.
    pub fn write(&mut self, layer: usize, slots: &[usize], keys: &[f32], values: &[f32]) {
        let w = self.width;
        let layer = &mut self.layers[layer];
        for (row, &slot) in slots.iter().enumerate() {
            layer.keys[slot * w..(slot + 1) * w].copy_from_slice(&keys[row * w..(row + 1) * w]);
            layer.values[slot * w..(slot + 1) * w].copy_from_slice(&values[row * w..(row + 1) * w]);
        }
    }
}
