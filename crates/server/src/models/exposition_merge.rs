//! One Prometheus exposition out of several models' own: each family's `# HELP` and `# TYPE`
//! once, followed by every model's samples of it (told apart by their `model_name` label).
//! Concatenating them instead would repeat a family's metadata, which scrapers refuse.

/// `texts` merged family by family, in the order families first appear; a sample line that
/// several texts share (one without a model label) is kept once.
pub fn merge_expositions(texts: &[String]) -> String {
    // (family name, metadata lines, sample lines)
    let mut families: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for text in texts {
        let mut current: Option<usize> = None;
        for line in text.lines() {
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                let name = rest.split_whitespace().next().unwrap_or_default();
                let at = match families.iter().position(|(n, _, _)| n == name) {
                    Some(at) => at,
                    None => {
                        families.push((name.to_owned(), Vec::new(), Vec::new()));
                        families.len() - 1
                    }
                };
                if !families[at].1.iter().any(|l| l == line) {
                    families[at].1.push(line.to_owned());
                }
                current = Some(at);
            } else if !line.is_empty() {
                let at = match current {
                    Some(at) => at,
                    None => {
                        families.push((String::new(), Vec::new(), Vec::new()));
                        let at = families.len() - 1;
                        current = Some(at);
                        at
                    }
                };
                if !families[at].2.iter().any(|l| l == line) {
                    families[at].2.push(line.to_owned());
                }
            }
        }
    }
    let mut out = String::new();
    for (_, metadata, samples) in families {
        for line in metadata.iter().chain(&samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_keeps_one_header_and_every_models_samples() {
        let a = "# HELP x_total X.\n# TYPE x_total counter\nx_total{model_name=\"a\"} 1\n\
                 # HELP up Up.\n# TYPE up gauge\nup 1\n"
            .to_owned();
        let b = "# HELP x_total X.\n# TYPE x_total counter\nx_total{model_name=\"b\"} 2\n\
                 # HELP up Up.\n# TYPE up gauge\nup 1\n"
            .to_owned();
        assert_eq!(
            merge_expositions(&[a, b]),
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{model_name=\"a\"} 1\n\
             x_total{model_name=\"b\"} 2\n# HELP up Up.\n# TYPE up gauge\nup 1\n"
        );
    }
}
