//! `LocalAttention`: the sliding-window layers of a hybrid model (Gemma 3): which layers
//! slide, how far they see, and the RoPE base they rotate with.

use super::sliding_window::SlidingWindow;

/// How one layer attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Every earlier position (and itself).
    Global,
    /// Only the last [`LocalAttention::window`] positions.
    Sliding,
}

/// A model whose layers mix sliding-window and global attention.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAttention {
    pub window: SlidingWindow,
    /// Each layer's kind, from layer 0.
    pub layers: Vec<LayerKind>,
    /// The RoPE base of the sliding layers (global ones keep the model's `rope_theta` and
    /// its scaling; sliding ones rotate unscaled).
    pub rope_theta: f64,
}

impl LocalAttention {
    /// Every `period`-th layer global (counting from 1), the others sliding: transformers'
    /// `sliding_window_pattern` and llama.cpp's rule for a GGUF without a pattern key
    /// (`il % period == period - 1` is global). As llama.cpp reads them, a period of 1 makes
    /// every layer global and a period of 0 every layer sliding.
    pub fn every_nth_global(period: usize, num_layers: usize) -> Vec<LayerKind> {
        (0..num_layers)
            .map(|il| {
                if period == 0 || il % period != period - 1 {
                    LayerKind::Sliding
                } else {
                    LayerKind::Global
                }
            })
            .collect()
    }

    /// Layer `layer`'s window, `None` for a global layer. A layer past the list (a
    /// `num_hidden_layers` override that grew the model) is global.
    pub fn window_of(&self, layer: usize) -> Option<SlidingWindow> {
        match self.layers.get(layer) {
            Some(LayerKind::Sliding) => Some(self.window),
            Some(LayerKind::Global) | None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global_as_llama_cpp_reads_a_gemma3_file() {
        let kinds = LocalAttention::every_nth_global(6, 18);
        let global: Vec<usize> = (0..18).filter(|&i| kinds[i] == LayerKind::Global).collect();
        assert_eq!(global, [5, 11, 17]);
        assert!(LocalAttention::every_nth_global(1, 3)
            .iter()
            .all(|&k| k == LayerKind::Global));
        assert!(LocalAttention::every_nth_global(0, 3)
            .iter()
            .all(|&k| k == LayerKind::Sliding));
    }
}
