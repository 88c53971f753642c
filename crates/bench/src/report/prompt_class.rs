//! `PromptClass`: whether a request's prompt is short or long, by its token count against a
//! threshold, so a report can show what long prompts do to short ones.

/// The two prompt-length classes of the per-class report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PromptClass {
    Short,
    Long,
}

impl PromptClass {
    /// Every class, in the order reports list them.
    pub const ALL: [PromptClass; 2] = [PromptClass::Short, PromptClass::Long];

    /// `Long` from `threshold` prompt tokens up, `Short` below.
    pub fn of(prompt_tokens: usize, threshold: usize) -> Self {
        if prompt_tokens >= threshold {
            PromptClass::Long
        } else {
            PromptClass::Short
        }
    }

    /// The class's key in JSON and its word in tables.
    pub fn name(self) -> &'static str {
        match self {
            PromptClass::Short => "short",
            PromptClass::Long => "long",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_itself_is_long() {
        assert_eq!(PromptClass::of(7999, 8000), PromptClass::Short);
        assert_eq!(PromptClass::of(8000, 8000), PromptClass::Long);
        assert_eq!(PromptClass::of(8, 8000), PromptClass::Short);
        assert_eq!(PromptClass::of(0, 0), PromptClass::Long);
    }
}
