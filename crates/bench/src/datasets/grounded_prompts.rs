//! The input-grounded dataset: chat prompts whose replies copy most of their text from the
//! prompt (code edits, extraction, rewriting, format conversion), the workload on which
//! prompt-lookup speculation pays.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

/// The kinds of task, taken in turn so every run of a few prompts has each of them. The prose
/// and table tasks put their text before the instruction: small models (the default
/// SmolLM2-135M) then copy it rather than wander off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    /// Rename one variable in a small function (Python, JavaScript or Rust).
    RenameVariable,
    /// List every e-mail address found in a short memo.
    ExtractEmails,
    /// Give back a paragraph with its misspelt words corrected.
    FixTypos,
    /// Rewrite CSV rows as a Markdown table.
    CsvToMarkdown,
    /// Rewrite a flat JSON object as YAML.
    JsonToYaml,
    /// Replace one word everywhere in a paragraph.
    ReplaceWord,
}

const TASKS: [Task; 6] = [
    Task::RenameVariable,
    Task::ExtractEmails,
    Task::FixTypos,
    Task::CsvToMarkdown,
    Task::JsonToYaml,
    Task::ReplaceWord,
];

const FIRST_NAMES: &[&str] = &[
    "alice", "bruno", "chen", "dana", "elif", "farah", "goran", "hana", "ivan", "julia", "kofi",
    "lena", "mateo", "nadia", "omar", "priya", "quinn", "rosa", "sven", "tariq", "uma", "viktor",
    "wendy", "yusuf", "zoe",
];
const LAST_NAMES: &[&str] = &[
    "adams", "berg", "costa", "dubois", "evans", "fischer", "garcia", "hughes", "ito", "jensen",
    "kowalski", "lopez", "moreau", "novak", "okafor", "petrov", "quist", "rossi", "silva",
    "tanaka", "ueda", "varga", "weber", "young", "zhang",
];
const DOMAINS: &[&str] = &[
    "example.com",
    "mail.example.org",
    "northwind.test",
    "acme.example",
    "lab.example.net",
    "harbor.test",
];
const NOUNS: &[&str] = &[
    "total", "count", "price", "offset", "score", "weight", "limit", "index", "width", "height",
    "budget", "delay", "ratio", "balance", "length", "speed",
];
const NEW_NAME_PARTS: &[&str] = &[
    "running",
    "current",
    "final",
    "partial",
    "next",
    "accumulated",
    "scaled",
    "raw",
    "adjusted",
    "cached",
];
const CITIES: &[&str] = &[
    "Lisbon", "Oslo", "Nairobi", "Osaka", "Lima", "Krakow", "Austin", "Hanoi", "Porto", "Quebec",
    "Tunis", "Perth",
];
const PRODUCTS: &[&str] = &[
    "kettle", "lamp", "backpack", "notebook", "headset", "blender", "umbrella", "keyboard", "tent",
    "bicycle", "monitor", "scarf",
];
const TOPICS: &[&str] = &[
    "the library opening hours",
    "the team offsite in spring",
    "the new parking rules",
    "the quarterly budget review",
    "the garden volunteer day",
    "the server migration",
    "the school science fair",
    "the museum night tour",
];
/// Sentences of the prose tasks; a paragraph is a seeded pick of them.
const SENTENCES: &[&str] = &[
    "The committee will meet again on Thursday to discuss the proposal in more detail.",
    "Several residents asked whether the bridge would stay open during the repairs.",
    "Our new office is on the third floor, next to the small kitchen and the meeting room.",
    "Please remember to bring your badge, because the front desk cannot print new ones.",
    "The weather forecast says it will rain most of the afternoon, so pack a jacket.",
    "We received more applications this year than in the previous three years together.",
    "The recipe needs two cups of flour, one egg, and a little milk to make the batter.",
    "After the update, the application starts faster and uses less memory than before.",
    "The train to the coast leaves every hour and takes about ninety minutes.",
    "Every volunteer gets a map of the park, a pair of gloves, and a bottle of water.",
    "The report describes how the river changed its course over the last century.",
    "Visitors can borrow books for three weeks and renew them twice online.",
    "The orchestra practiced the second movement until everyone knew it by heart.",
    "Our support team answers most questions within one working day.",
    "The old factory was turned into a market with small shops and a theater.",
    "Students should submit their projects before the end of the month.",
];
/// Words a paragraph's word-replacement task may swap, with what to put instead.
const REPLACEMENTS: &[(&str, &str)] = &[
    ("the", "this"),
    ("and", "plus"),
    ("to", "toward"),
    ("of", "from"),
    ("a", "one"),
];

/// Grounded prompts drawn from one seed: the same seed gives the same prompts in the same
/// order; the task kinds come in turn, their contents are drawn.
pub struct GroundedPrompts {
    rng: StdRng,
    next_task: usize,
}

impl GroundedPrompts {
    pub fn new(seed: u64) -> Self {
        GroundedPrompts {
            rng: StdRng::seed_from_u64(seed),
            next_task: 0,
        }
    }

    fn prompt(&mut self, task: Task) -> String {
        let rng = &mut self.rng;
        match task {
            Task::RenameVariable => rename_variable(rng),
            Task::ExtractEmails => extract_emails(rng),
            Task::FixTypos => fix_typos(rng),
            Task::CsvToMarkdown => csv_to_markdown(rng),
            Task::JsonToYaml => json_to_yaml(rng),
            Task::ReplaceWord => replace_word(rng),
        }
    }
}

impl Iterator for GroundedPrompts {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let task = TASKS[self.next_task % TASKS.len()];
        self.next_task += 1;
        Some(self.prompt(task))
    }
}

fn pick<'a>(pool: &[&'a str], rng: &mut StdRng) -> &'a str {
    pool.choose(rng).expect("pools are not empty")
}

/// `count` different entries of `pool`, in a seeded order.
fn pick_distinct<'a>(pool: &[&'a str], count: usize, rng: &mut StdRng) -> Vec<&'a str> {
    let mut all = pool.to_vec();
    all.shuffle(rng);
    all.truncate(count);
    all
}

fn paragraph(rng: &mut StdRng, sentences: usize) -> String {
    pick_distinct(SENTENCES, sentences, rng).join(" ")
}

fn rename_variable(rng: &mut StdRng) -> String {
    let [a, b] = pick_distinct(NOUNS, 2, rng)[..] else {
        unreachable!("two nouns were asked for")
    };
    let old = format!("{a}_{b}");
    let new = format!("{}_{a}", pick(NEW_NAME_PARTS, rng));
    let (step, cap) = (rng.random_range(2..9), rng.random_range(50..500));
    let items = pick(&["items", "values", "records", "samples"], rng);
    let function = pick(
        &["summarize", "accumulate", "clamp_sum", "collect_total"],
        rng,
    );
    let (language, code) = match rng.random_range(0..3) {
        0 => (
            "Python",
            format!(
                "def {function}({items}, factor):\n    {old} = 0\n    for item in {items}:\n        \
                 if item is None:\n            continue\n        {old} += item * factor\n        \
                 if {old} > {cap}:\n            {old} = {cap}\n            break\n    \
                 print(\"{old} is\", {old})\n    return {old} // {step}\n"
            ),
        ),
        1 => (
            "JavaScript",
            format!(
                "function {function}({items}, factor) {{\n  let {old} = 0;\n  for (const item of {items}) {{\n    \
                 if (item === null) {{\n      continue;\n    }}\n    {old} += item * factor;\n    \
                 if ({old} > {cap}) {{\n      {old} = {cap};\n      break;\n    }}\n  }}\n  \
                 console.log(\"{old} is\", {old});\n  return Math.floor({old} / {step});\n}}\n"
            ),
        ),
        _ => (
            "Rust",
            format!(
                "fn {function}({items}: &[Option<i64>], factor: i64) -> i64 {{\n    let mut {old} = 0;\n    \
                 for item in {items}.iter().flatten() {{\n        {old} += item * factor;\n        \
                 if {old} > {cap} {{\n            {old} = {cap};\n            break;\n        }}\n    }}\n    \
                 println!(\"{old} is {{}}\", {old});\n    {old} / {step}\n}}\n"
            ),
        ),
    };
    format!(
        "Rename the variable `{old}` to `{new}` everywhere in this {language} function, strings \
         included. Reply with the whole updated function and nothing else.\n\n```\n{code}```"
    )
}

fn extract_emails(rng: &mut StdRng) -> String {
    let people = rng.random_range(3..6);
    let firsts = pick_distinct(FIRST_NAMES, people, rng);
    let topic = pick(TOPICS, rng);
    let mut memo = format!("Notes about {topic}.");
    for first in firsts {
        let last = pick(LAST_NAMES, rng);
        let email = format!("{first}.{last}@{}", pick(DOMAINS, rng));
        let name = capitalized(first);
        let sentence = match rng.random_range(0..4) {
            0 => format!(" {name} will send the agenda; write to {email} with questions."),
            1 => format!(
                " For the budget, contact {name} {} at {email}.",
                capitalized(last)
            ),
            2 => format!(" {name} ({email}) has offered to take the minutes."),
            _ => format!(" Late changes go to {email}, and {name} will confirm them."),
        };
        memo.push_str(&sentence);
        memo.push(' ');
        memo.push_str(pick(SENTENCES, rng));
    }
    format!("{memo}\n\nList every email address in the text above, one per line.")
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn fix_typos(rng: &mut StdRng) -> String {
    let sentences = rng.random_range(3..6);
    let text = paragraph(rng, sentences);
    let words: Vec<String> = text
        .split(' ')
        .map(|word| {
            if word.len() > 4 && rng.random_bool(0.25) {
                misspelt(word, rng)
            } else {
                word.to_owned()
            }
        })
        .collect();
    format!(
        "{}\n\nFix the spelling mistakes in the text above and reply with the corrected text.",
        words.join(" ")
    )
}

/// The word with two neighbouring inner letters swapped, or one doubled; always a change.
fn misspelt(word: &str, rng: &mut StdRng) -> String {
    let mut chars: Vec<char> = word.chars().collect();
    let letters = chars.iter().take_while(|c| c.is_alphabetic()).count();
    if letters < 4 {
        return word.to_owned();
    }
    // Inner letters only, so the word keeps its first and last letter, as most typos do.
    let at = rng.random_range(1..letters - 2);
    if rng.random_bool(0.5) && chars[at] != chars[at + 1] {
        chars.swap(at, at + 1);
    } else {
        chars.insert(at, chars[at]);
    }
    chars.into_iter().collect()
}

fn csv_to_markdown(rng: &mut StdRng) -> String {
    let rows = rng.random_range(4..8);
    let mut csv = String::from("order_id,customer,city,product,quantity,price\n");
    for _ in 0..rows {
        csv.push_str(&format!(
            "{},{} {},{},{},{},{}.{:02}\n",
            rng.random_range(10_000..99_999),
            capitalized(pick(FIRST_NAMES, rng)),
            capitalized(pick(LAST_NAMES, rng)),
            pick(CITIES, rng),
            pick(PRODUCTS, rng),
            rng.random_range(1..20),
            rng.random_range(3..400),
            rng.random_range(0..100),
        ));
    }
    format!("Here is a CSV file:\n\n{csv}\nRewrite it as a Markdown table with the same rows.")
}

fn json_to_yaml(rng: &mut StdRng) -> String {
    let first = pick(FIRST_NAMES, rng);
    let last = pick(LAST_NAMES, rng);
    let tags: Vec<String> = pick_distinct(PRODUCTS, 3, rng)
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect();
    let json = format!(
        "{{\n  \"id\": {},\n  \"name\": \"{} {}\",\n  \"email\": \"{first}.{last}@{}\",\n  \
         \"city\": \"{}\",\n  \"active\": {},\n  \"balance\": {}.{:02},\n  \"tags\": [{}],\n  \
         \"manager\": {{\"name\": \"{}\", \"team\": \"{}\"}}\n}}",
        rng.random_range(1000..9999),
        capitalized(first),
        capitalized(last),
        pick(DOMAINS, rng),
        pick(CITIES, rng),
        rng.random_bool(0.5),
        rng.random_range(0..5000),
        rng.random_range(0..100),
        tags.join(", "),
        capitalized(pick(FIRST_NAMES, rng)),
        pick(&["platform", "sales", "research", "support", "design"], rng),
    );
    format!(
        "Rewrite this JSON object as YAML, keeping every key and value and the key order. \
         Reply with the YAML only.\n\n```json\n{json}\n```"
    )
}

fn replace_word(rng: &mut StdRng) -> String {
    let sentences = rng.random_range(3..6);
    let text = paragraph(rng, sentences);
    let (old, new) = *REPLACEMENTS
        .choose(rng)
        .expect("replacements are not empty");
    format!("{text}\n\nRewrite the text above with every \"{old}\" replaced by \"{new}\".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_prompts_and_another_seed_others() {
        let first: Vec<String> = GroundedPrompts::new(7).take(30).collect();
        let again: Vec<String> = GroundedPrompts::new(7).take(30).collect();
        let other: Vec<String> = GroundedPrompts::new(8).take(30).collect();
        assert_eq!(first, again);
        assert!(first.iter().zip(&other).all(|(a, b)| a != b));
    }

    #[test]
    fn twenty_prompts_are_all_different_and_cover_every_task() {
        let prompts: Vec<String> = GroundedPrompts::new(0).take(20).collect();
        let distinct: std::collections::BTreeSet<&String> = prompts.iter().collect();
        assert_eq!(distinct.len(), 20);
        for instruction in [
            "Rename the variable",
            "List every email",
            "Fix the spelling",
            "Rewrite it as a Markdown table",
            "Rewrite this JSON",
            "Rewrite the text above with every",
        ] {
            assert!(
                prompts.iter().any(|p| p.contains(instruction)),
                "no prompt asks {instruction:?}"
            );
        }
    }

    #[test]
    fn rename_prompts_name_a_variable_their_code_uses() {
        let mut prompts = GroundedPrompts::new(3);
        for _ in 0..6 {
            let prompt = prompts.prompt(Task::RenameVariable);
            let old = prompt
                .split('`')
                .nth(1)
                .expect("the old name is in backticks");
            let code = prompt.split("```").nth(1).expect("the code is fenced");
            assert!(code.matches(old).count() >= 4, "{prompt}");
        }
    }

    #[test]
    fn email_prompts_hold_an_address_per_person() {
        let mut prompts = GroundedPrompts::new(5);
        for _ in 0..6 {
            let prompt = prompts.prompt(Task::ExtractEmails);
            let addresses = prompt
                .split_whitespace()
                .filter(|w| w.contains('@'))
                .count();
            assert!((3..6).contains(&addresses), "{prompt}");
        }
    }

    #[test]
    fn misspelt_words_differ_from_the_word_but_keep_its_punctuation() {
        let mut rng = StdRng::seed_from_u64(1);
        for word in ["committee", "residents,", "application."] {
            let typo = misspelt(word, &mut rng);
            assert_ne!(typo, word);
            assert_eq!(typo.chars().last(), word.chars().last());
        }
        assert_eq!(misspelt("the", &mut rng), "the");
    }
}
