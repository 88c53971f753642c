//! The configurations `tune` may try: the values of each server flag and which combinations
//! a server accepts.

use serde::Serialize;

use crate::args::TuneArgs;

/// One server flag and the values to try, in the order given.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Knob {
    /// The flag without its dashes, e.g. `max-num-seqs`.
    pub flag: &'static str,
    pub values: Vec<f64>,
}

/// A configuration: for each knob of the space, the index of its value.
pub type Point = Vec<usize>;

/// The knobs that vary; flags given no values are left to the server's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneSpace {
    pub knobs: Vec<Knob>,
}

const BATCHED_TOKENS: &str = "max-num-batched-tokens";
const SEQS: &str = "max-num-seqs";

impl TuneSpace {
    pub fn from_args(args: &TuneArgs) -> anyhow::Result<Self> {
        let whole = |values: &[usize]| -> Vec<f64> { values.iter().map(|&v| v as f64).collect() };
        Self::new(vec![
            Knob {
                flag: BATCHED_TOKENS,
                values: whole(&args.max_num_batched_tokens),
            },
            Knob {
                flag: SEQS,
                values: whole(&args.max_num_seqs),
            },
            Knob {
                flag: "long-prefill-token-threshold",
                values: whole(&args.long_prefill_token_threshold),
            },
            Knob {
                flag: "target-itl-ms",
                values: args.target_itl_ms.clone(),
            },
        ])
    }

    /// Keeps the knobs with values; refuses values no server takes and a space with nothing
    /// to run.
    pub fn new(knobs: Vec<Knob>) -> anyhow::Result<Self> {
        for knob in &knobs {
            if let Some(bad) = knob.values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                anyhow::bail!("--{} values must be positive, got {bad}", knob.flag);
            }
            let mut seen = knob.values.clone();
            seen.sort_by(f64::total_cmp);
            if let Some(twice) = seen.windows(2).find(|pair| pair[0] == pair[1]) {
                anyhow::bail!("--{} lists {} twice", knob.flag, twice[0]);
            }
        }
        let space = TuneSpace {
            knobs: knobs.into_iter().filter(|k| !k.values.is_empty()).collect(),
        };
        if space.grid().is_empty() {
            anyhow::bail!(
                "no configuration to try: every --max-num-batched-tokens is below every --max-num-seqs"
            );
        }
        Ok(space)
    }

    /// Whether `point` names a value of every knob.
    pub fn contains(&self, point: &[usize]) -> bool {
        point.len() == self.knobs.len()
            && point
                .iter()
                .zip(&self.knobs)
                .all(|(&index, knob)| index < knob.values.len())
    }

    /// Whether a server accepts the configuration: a step budget below the number of running
    /// sequences cannot give each of them a token, and vLLM and tokenmill both refuse it.
    pub fn is_valid(&self, point: &[usize]) -> bool {
        if !self.contains(point) {
            return false;
        }
        match (self.value(point, BATCHED_TOKENS), self.value(point, SEQS)) {
            (Some(tokens), Some(seqs)) => tokens >= seqs,
            _ => true,
        }
    }

    fn value(&self, point: &[usize], flag: &str) -> Option<f64> {
        let knob = self.knobs.iter().position(|k| k.flag == flag)?;
        Some(self.knobs[knob].values[point[knob]])
    }

    /// Every valid configuration, the first knob varying slowest.
    pub fn grid(&self) -> Vec<Point> {
        let mut points: Vec<Point> = vec![Vec::new()];
        for knob in &self.knobs {
            points = points
                .into_iter()
                .flat_map(|prefix| {
                    (0..knob.values.len()).map(move |index| {
                        let mut point = prefix.clone();
                        point.push(index);
                        point
                    })
                })
                .collect();
        }
        points.retain(|p| self.is_valid(p));
        points
    }

    /// The configuration's server flags, e.g. `--max-num-batched-tokens 256 --max-num-seqs 32`.
    pub fn flags(&self, point: &[usize]) -> String {
        self.settings(point)
            .iter()
            .map(|(flag, value)| format!("--{flag} {value}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Flag and value of each knob.
    pub fn settings(&self, point: &[usize]) -> Vec<(&'static str, f64)> {
        self.knobs
            .iter()
            .zip(point)
            .map(|(knob, &index)| (knob.flag, knob.values[index]))
            .collect()
    }

    /// A file-name-safe name, e.g. `max-num-batched-tokens-256_max-num-seqs-32`.
    pub fn name(&self, point: &[usize]) -> String {
        let name = self
            .settings(point)
            .iter()
            .map(|(flag, value)| format!("{flag}-{value}"))
            .collect::<Vec<_>>()
            .join("_");
        if name.is_empty() {
            "defaults".to_owned()
        } else {
            name
        }
    }
}

/// The server command for a configuration: its flags replace `{flags}` in the template, or
/// follow it when the template has no `{flags}`.
pub fn server_command(template: &str, flags: &str) -> String {
    if template.contains("{flags}") {
        template.replace("{flags}", flags)
    } else if flags.is_empty() {
        template.to_owned()
    } else {
        format!("{template} {flags}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(tokens: &[f64], seqs: &[f64]) -> TuneSpace {
        TuneSpace::new(vec![
            Knob {
                flag: BATCHED_TOKENS,
                values: tokens.to_vec(),
            },
            Knob {
                flag: SEQS,
                values: seqs.to_vec(),
            },
            Knob {
                flag: "target-itl-ms",
                values: Vec::new(),
            },
        ])
        .unwrap()
    }

    #[test]
    fn the_grid_skips_budgets_below_the_sequence_limit() {
        let space = space(&[8.0, 64.0], &[16.0, 4.0]);
        assert_eq!(space.knobs.len(), 2, "a knob without values does not vary");
        assert_eq!(space.grid(), vec![vec![0, 1], vec![1, 0], vec![1, 1]]);
    }

    #[test]
    fn flags_and_names_spell_each_value() {
        let space = space(&[256.0], &[32.0]);
        assert_eq!(
            space.flags(&[0, 0]),
            "--max-num-batched-tokens 256 --max-num-seqs 32"
        );
        assert_eq!(
            space.name(&[0, 0]),
            "max-num-batched-tokens-256_max-num-seqs-32"
        );
    }

    #[test]
    fn flags_replace_the_placeholder_or_follow_the_command() {
        assert_eq!(
            server_command("tokenmill serve {flags} --port 8020", "--max-num-seqs 8"),
            "tokenmill serve --max-num-seqs 8 --port 8020"
        );
        assert_eq!(
            server_command("tokenmill serve", "--max-num-seqs 8"),
            "tokenmill serve --max-num-seqs 8"
        );
    }

    #[test]
    fn values_no_server_takes_are_refused_by_flag_name() {
        let knob = |values: Vec<f64>| {
            TuneSpace::new(vec![Knob {
                flag: "target-itl-ms",
                values,
            }])
            .unwrap_err()
            .to_string()
        };
        assert!(knob(vec![0.0]).contains("--target-itl-ms"));
        assert!(knob(vec![f64::NAN]).contains("positive"));
        assert!(knob(vec![5.0, 5.0]).contains("twice"));
        let error = TuneSpace::new(vec![
            Knob {
                flag: BATCHED_TOKENS,
                values: vec![8.0],
            },
            Knob {
                flag: SEQS,
                values: vec![16.0],
            },
        ])
        .unwrap_err();
        assert!(error.to_string().contains("no configuration"), "{error}");
    }
}
