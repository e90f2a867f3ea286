//! Writes a [`Profile`]: collapsed stacks (`root;...;leaf count`, what flamegraph.pl and
//! inferno read), speedscope's JSON (one sampled profile per thread), or an interactive
//! flame graph SVG (inferno).

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::json;

use super::Profile;

/// The output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An interactive flame graph (SVG).
    Svg,
    /// speedscope's file format (JSON).
    Speedscope,
    /// Collapsed stacks, one line per distinct stack.
    Collapsed,
}

/// The collapsed lines of a profile, most samples first: the thread label (when the
/// profile has them), then the frames root first, `;`-separated, then the count.
pub fn collapsed_lines(profile: &Profile) -> Vec<String> {
    profile
        .stacks()
        .into_iter()
        .map(|(thread, frames, n)| {
            let mut parts: Vec<&str> = Vec::with_capacity(frames.len() + 1);
            if !thread.is_empty() {
                parts.push(thread);
            }
            parts.extend(frames);
            format!("{} {n}", parts.join(";"))
        })
        .collect()
}

/// The profile as speedscope's JSON: one `sampled` profile per thread (one for all when
/// the profile has no thread labels), weights in samples.
pub fn speedscope_json(profile: &Profile, name: &str) -> serde_json::Value {
    let mut frame_index: BTreeMap<&str, usize> = BTreeMap::new();
    let mut frames: Vec<&str> = Vec::new();
    let mut by_thread: BTreeMap<&str, (Vec<Vec<usize>>, Vec<u64>)> = BTreeMap::new();
    for (thread, stack, n) in profile.stacks() {
        let ids: Vec<usize> = stack
            .iter()
            .map(|f| {
                *frame_index.entry(f).or_insert_with(|| {
                    frames.push(f);
                    frames.len() - 1
                })
            })
            .collect();
        let entry = by_thread.entry(thread).or_default();
        entry.0.push(ids);
        entry.1.push(n);
    }
    if by_thread.is_empty() {
        // speedscope opens no file without a profile: an empty profile says "no samples".
        by_thread.insert("", (Vec::new(), Vec::new()));
    }
    let profiles: Vec<serde_json::Value> = by_thread
        .into_iter()
        .map(|(thread, (samples, weights))| {
            let total: u64 = weights.iter().sum();
            json!({
                "type": "sampled",
                "name": if thread.is_empty() { name } else { thread },
                "unit": "none",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })
        })
        .collect();
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": concat!("cdac ", env!("CARGO_PKG_VERSION")),
        "name": name,
        "activeProfileIndex": 0,
        "shared": { "frames": frames.iter().map(|f| json!({ "name": f })).collect::<Vec<_>>() },
        "profiles": profiles,
    })
}

/// Writes the profile as an interactive flame graph SVG titled `title`.
pub fn write_svg(profile: &Profile, title: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let lines = collapsed_lines(profile);
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = "samples".to_string();
    if lines.is_empty() {
        // inferno refuses an empty input; an empty profile is still a valid answer.
        return writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="600" height="40"><text x="10" y="25">{}: no samples</text></svg>"#,
            escape(title)
        );
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes the profile in `format`.
pub fn write(
    profile: &Profile,
    format: Format,
    title: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match format {
        Format::Svg => write_svg(profile, title, out),
        Format::Speedscope => {
            let v = speedscope_json(profile, title);
            serde_json::to_writer(&mut *out, &v).map_err(std::io::Error::other)?;
            writeln!(out)
        }
        Format::Collapsed => {
            for line in collapsed_lines(profile) {
                writeln!(out, "{line}")?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_profile() -> Profile {
        let mut p = Profile::new();
        let t = p.intern("worker (7)");
        let (main, heavy, light) = (p.intern("Main"), p.intern("Heavy"), p.intern("Light"));
        p.add(t, vec![main, heavy], 3);
        p.add(t, vec![main, light], 1);
        p
    }

    #[test]
    fn collapsed_and_speedscope_agree_on_counts() {
        let p = sample_profile();
        assert_eq!(
            collapsed_lines(&p),
            vec!["worker (7);Main;Heavy 3", "worker (7);Main;Light 1"]
        );
        let v = speedscope_json(&p, "test");
        let frames = v["shared"]["frames"].as_array().expect("frames");
        let prof = &v["profiles"][0];
        assert_eq!(prof["name"], "worker (7)");
        assert_eq!(prof["endValue"], 4);
        let first: Vec<&str> = prof["samples"][0]
            .as_array()
            .expect("sample")
            .iter()
            .map(|i| {
                frames[i.as_u64().expect("index") as usize]["name"]
                    .as_str()
                    .expect("name")
            })
            .collect();
        assert_eq!(first, vec!["Main", "Heavy"]);
        assert_eq!(prof["weights"], json!([3, 1]));
        let empty = speedscope_json(&Profile::new(), "empty");
        assert_eq!(empty["profiles"].as_array().map(Vec::len), Some(1));
        assert_eq!(empty["profiles"][0]["endValue"], 0);
    }

    #[test]
    fn svg_names_the_frames() {
        let mut svg = Vec::new();
        write_svg(&sample_profile(), "t", &mut svg).expect("svg");
        let svg = String::from_utf8(svg).expect("utf8");
        assert!(svg.starts_with("<?xml"), "{}", &svg[..40]);
        assert!(svg.contains("Heavy (3 samples, 75.00%)"), "Heavy's share");
        let mut empty = Vec::new();
        write_svg(&Profile::new(), "t", &mut empty).expect("empty svg");
        assert!(String::from_utf8(empty)
            .expect("utf8")
            .contains("no samples"));
    }
}
