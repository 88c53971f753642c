//! The open-chat dataset: short open-ended chat questions whose replies are new text, not
//! copies of the prompt; the counterpart of the grounded dataset, where prompt lookup finds
//! little to draft.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

const SUBJECTS: &[&str] = &[
    "a lighthouse keeper",
    "a retired astronaut",
    "a young baker",
    "a lost robot",
    "a street musician",
    "a curious fox",
    "a night-shift nurse",
    "an old fisherman",
    "a chess champion",
    "a shy dragon",
];
const GOALS: &[&str] = &[
    "finds an unexpected letter",
    "has to cross a frozen lake",
    "learns to paint",
    "opens a tiny restaurant",
    "gets lost in a big city",
    "builds a boat from scratch",
    "meets a talking cat",
    "plants a garden on a roof",
];
const CONCEPTS: &[&str] = &[
    "how a rainbow forms",
    "why the sky is blue",
    "how vaccines train the immune system",
    "what inflation is",
    "how a compass works",
    "why leaves change colour in autumn",
    "how bread rises",
    "what a black hole is",
    "how bees make honey",
    "why we have seasons",
    "how a refrigerator keeps food cold",
    "what an electric circuit is",
];
const ACTIVITIES: &[&str] = &[
    "learning a new language",
    "running a first marathon",
    "keeping houseplants alive",
    "sleeping better",
    "saving money each month",
    "studying for an exam",
    "cooking for a large family",
    "starting to draw",
    "traveling on a small budget",
    "working from home",
];
const THEMES: &[&str] = &[
    "the sea at dawn",
    "a quiet winter evening",
    "the first day of spring",
    "an old train station",
    "a city after rain",
    "friendship",
    "the moon over a desert",
    "a busy market",
];
const AUDIENCES: &[&str] = &[
    "a ten-year-old",
    "a busy manager",
    "a new student",
    "my grandmother",
];

/// Draws allowed for a question not asked yet before a repeat is accepted: the pools hold a
/// few hundred questions, so a long run repeats some rather than search forever.
const FRESH_ATTEMPTS: usize = 32;

/// Open-chat prompts drawn from one seed: the same seed gives the same prompts in the same
/// order, none repeated while unasked ones are easy to find.
pub struct OpenChatPrompts {
    rng: StdRng,
    asked: HashSet<String>,
}

impl OpenChatPrompts {
    pub fn new(seed: u64) -> Self {
        OpenChatPrompts {
            rng: StdRng::seed_from_u64(seed),
            asked: HashSet::new(),
        }
    }

    fn draw(&mut self) -> String {
        let rng = &mut self.rng;
        match rng.random_range(0..5) {
            0 => format!(
                "Write a short story about {} who {}.",
                pick(SUBJECTS, rng),
                pick(GOALS, rng)
            ),
            1 => format!(
                "Explain {} to {}.",
                pick(CONCEPTS, rng),
                pick(AUDIENCES, rng)
            ),
            2 => format!(
                "Give me {} practical tips for {}.",
                rng.random_range(3..7),
                pick(ACTIVITIES, rng)
            ),
            3 => format!("Write a poem about {}.", pick(THEMES, rng)),
            _ => format!(
                "What would you say to {} who is nervous about {}?",
                pick(AUDIENCES, rng),
                pick(ACTIVITIES, rng)
            ),
        }
    }
}

fn pick<'a>(pool: &[&'a str], rng: &mut StdRng) -> &'a str {
    pool.choose(rng).expect("pools are not empty")
}

impl Iterator for OpenChatPrompts {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut prompt = self.draw();
        for _ in 1..FRESH_ATTEMPTS {
            if !self.asked.contains(&prompt) {
                break;
            }
            prompt = self.draw();
        }
        self.asked.insert(prompt.clone());
        Some(prompt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_questions() {
        let first: Vec<String> = OpenChatPrompts::new(2).take(20).collect();
        let again: Vec<String> = OpenChatPrompts::new(2).take(20).collect();
        assert_eq!(first, again);
        assert_ne!(first, OpenChatPrompts::new(3).take(20).collect::<Vec<_>>());
    }

    #[test]
    fn fifty_questions_are_all_different() {
        let prompts: Vec<String> = OpenChatPrompts::new(0).take(50).collect();
        let distinct: HashSet<&String> = prompts.iter().collect();
        assert_eq!(distinct.len(), 50, "{prompts:#?}");
    }

    #[test]
    fn more_questions_than_the_pools_hold_still_come() {
        assert_eq!(OpenChatPrompts::new(1).take(400).count(), 400);
    }
}
