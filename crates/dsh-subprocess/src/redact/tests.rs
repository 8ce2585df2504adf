use super::*;

fn redactor(pairs: &[(&str, &str)]) -> Arc<Redactor> {
    Arc::new(Redactor::new(pairs.iter().copied()).expect("redactor"))
}

/// Leftmost-longest replacement of the whole input at once, the slow obvious way.
fn reference(pairs: &[(&str, &str)], input: &[u8]) -> Vec<u8> {
    let mut patterns: Vec<(&[u8], &str)> = Vec::new();
    for (name, value) in pairs {
        if value.len() >= REDACT_MIN_LEN && !patterns.iter().any(|(v, _)| *v == value.as_bytes()) {
            patterns.push((value.as_bytes(), name));
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let longest = patterns
            .iter()
            .filter(|(value, _)| input[at..].starts_with(value))
            .max_by_key(|(value, _)| value.len());
        match longest {
            Some((value, name)) => {
                out.extend_from_slice(redaction_marker(name).as_bytes());
                at += value.len();
            }
            None => {
                out.push(input[at]);
                at += 1;
            }
        }
    }
    out
}

/// Feeds `chunks` in order and finishes, checking the hold-back bound after every chunk.
fn streamed(r: &Arc<Redactor>, chunks: &[&[u8]]) -> Vec<u8> {
    let mut stream = r.stream();
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend_from_slice(stream.feed(chunk));
        assert!(stream.held_len() < r.max_len.max(1), "held {} of max {}", stream.held_len(), r.max_len);
    }
    out.extend_from_slice(stream.finish());
    out
}

const OVERLAPPING: &[(&str, &str)] = &[
    ("SHORT", "abcdefgh"),
    ("LONG", "abcdefghij"),
    ("MIDDLE", "cdefghijkl"),
    ("WRAP", "xxabcdefgh"),
    ("REPEAT", "aaaaaaaaa"),
    ("TINY", "abc"),
];

#[test]
fn whole_input_redaction_is_leftmost_longest() {
    let r = redactor(OVERLAPPING);
    let cases: [&[u8]; 6] = [
        b"-abcdefghij-",
        b"-abcdefghi-",
        b"abcdefghijkl",
        b"xxabcdefghij",
        b"aaaaaaaaaaaaaaaaaaa",
        b"abc abcdefg",
    ];
    for input in cases {
        assert_eq!(r.redact(input).as_ref(), reference(OVERLAPPING, input).as_slice(), "{input:?}");
    }
    assert_eq!(r.redact(b"-abcdefghij-").as_ref(), b"-[redacted:LONG]-");
    assert_eq!(r.redact(b"-abcdefghi-").as_ref(), b"-[redacted:SHORT]i-");
    assert_eq!(r.redact(b"abcdefghijkl").as_ref(), b"[redacted:LONG]kl", "leftmost beats longer later");
    assert!(matches!(r.redact(b"abc abcdefg"), Cow::Borrowed(_)), "short values are never redacted");
}

#[test]
fn every_split_offset_gives_the_whole_input_result() {
    let r = redactor(OVERLAPPING);
    let inputs: [&[u8]; 5] = [
        b"one abcdefghij two abcdefghi three cdefghijkl xxabcdefghij aaaaaaaaaaa end",
        b"abcdefgh",
        b"abcdefghijabcdefghijkl",
        b"xxxabcdefgxxabcdefgh",
        b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
    ];
    for input in inputs {
        let expected = reference(OVERLAPPING, input);
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(streamed(&r, &[a, b]), expected, "split at {i} of {input:?}");
            for j in i..=input.len() {
                let (b, c) = input[i..].split_at(j - i);
                assert_eq!(streamed(&r, &[a, b, c]), expected, "splits at {i}, {j} of {input:?}");
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(streamed(&r, &bytes), expected, "byte by byte: {input:?}");
    }
}

#[test]
fn random_streams_over_a_small_alphabet_match_the_reference() {
    let pairs: &[(&str, &str)] = &[
        ("A", "abababab"),
        ("B", "ababababab"),
        ("C", "babababa"),
        ("D", "aabbaabbc"),
        ("E", "bbbbbbbbbbbbbbbb"),
        ("F", "abcabcab"),
    ];
    let r = redactor(pairs);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let len = (next() % 200) as usize;
        let input: Vec<u8> = (0..len).map(|_| b"abc\n"[(next() % 4) as usize]).collect();
        let mut chunks = Vec::new();
        let mut at = 0;
        while at < input.len() {
            let n = 1 + (next() % 20) as usize;
            let end = (at + n).min(input.len());
            chunks.push(&input[at..end]);
            at = end;
        }
        assert_eq!(streamed(&r, &chunks), reference(pairs, &input), "{:?}", String::from_utf8_lossy(&input));
    }
}

#[test]
fn no_patterns_cost_nothing() {
    let r = Arc::new(Redactor::new([("SHORT_TOKEN", "1234567")]).expect("redactor"));
    assert!(r.is_empty());
    assert_eq!(r.len(), 0);
    let mut stream = r.stream();
    let chunk = b"1234567 and more".to_vec();
    let out = stream.feed(&chunk);
    assert_eq!(out.as_ptr(), chunk.as_ptr(), "the chunk itself, not a copy");
    assert_eq!(out.len(), chunk.len());
    assert_eq!(stream.finish(), b"");
    assert!(matches!(Redactor::empty().redact(b"x"), Cow::Borrowed(_)));
}

#[test]
fn output_without_a_secret_prefix_is_not_copied_or_held() {
    let r = redactor(&[("GITHUB_TOKEN", "ghp_secretvalue123")]);
    let mut stream = r.stream();
    let chunk = b"building...\nstep 2 done\n".to_vec();
    let out = stream.feed(&chunk);
    assert_eq!(out.as_ptr(), chunk.as_ptr());
    assert_eq!(out.len(), chunk.len(), "a line ending in a newline is never held back");
    assert_eq!(stream.held_len(), 0);
    // Only the part that may begin the value waits.
    assert_eq!(stream.feed(b"progress: g"), b"progress: ");
    assert_eq!(stream.held_len(), 1);
    assert_eq!(stream.feed(b"o on"), b"go on");
    assert_eq!(stream.held_len(), 0);
}

#[test]
fn a_value_split_across_chunks_is_redacted() {
    let r = redactor(&[("GITHUB_TOKEN", "ghp_secretvalue123")]);
    let mut stream = r.stream();
    assert_eq!(stream.feed(b"token: ghp_sec"), b"token: ");
    assert_eq!(stream.held_len(), 7);
    assert_eq!(stream.feed(b"retvalue123\n"), b"[redacted:GITHUB_TOKEN]\n");
    assert_eq!(stream.finish(), b"");
}

#[test]
fn a_value_or_its_prefix_at_the_stream_end() {
    let r = redactor(&[("GITHUB_TOKEN", "ghp_secretvalue123"), ("LONGER", "ghp_secretvalue123456")]);
    let mut stream = r.stream();
    assert_eq!(stream.feed(b"x ghp_secretvalue123"), b"x ", "may still grow into the longer value");
    assert_eq!(stream.finish(), b"[redacted:GITHUB_TOKEN]");
    let mut stream = r.stream();
    assert_eq!(stream.feed(b"x ghp_secretval"), b"x ");
    assert_eq!(stream.finish(), b"ghp_secretval", "an unfinished value is released as it is");
    let mut stream = r.stream();
    assert_eq!(stream.feed(b"ghp_secretvalue1234567"), b"[redacted:LONGER]7");
    assert_eq!(stream.finish(), b"");
}

#[test]
fn names_values_and_debug() {
    let r =
        Redactor::new([("B_TOKEN", "same-value-1"), ("A_TOKEN", "same-value-1"), ("C_KEY", "other-value")])
            .expect("redactor");
    assert_eq!(r.len(), 2, "a value given twice is one value");
    assert_eq!(r.redact(b"same-value-1").as_ref(), b"[redacted:B_TOKEN]", "the first name is kept");
    let debug = format!("{r:?}");
    assert!(!debug.contains("same-value") && !debug.contains("other-value"), "{debug}");
    assert!(debug.contains("B_TOKEN"), "{debug}");
    let mut names: Vec<&str> = r.names().collect();
    names.sort();
    assert_eq!(names, ["B_TOKEN", "C_KEY"]);
}

#[test]
fn from_env_takes_scrubbed_credentials_and_named_variables() {
    let ambient = AmbientEnv::fixed([
        ("PATH", "/usr/local/bin:/usr/bin"),
        ("GITHUB_TOKEN", "ghp_secretvalue123"),
        ("B_TOKEN", "shared-secret-value"),
        ("A_SECRET", "shared-secret-value"),
        ("DATABASE_URL", "postgres://u:pw@h/db"),
        ("DSH_HOME", "/home/someone/.dsh"),
        ("DSH_MCP_TOKEN", "mcp-token-value"),
        ("SHORT_KEY", "1234567"),
        ("PLAIN", "plain-but-named"),
    ]);
    let r = Redactor::from_env(&ambient, true, &[]).expect("redactor");
    let text = b"ghp_secretvalue123 shared-secret-value postgres://u:pw@h/db /home/someone/.dsh \
                 mcp-token-value 1234567 plain-but-named /usr/local/bin:/usr/bin";
    assert_eq!(
        String::from_utf8_lossy(&r.redact(text)),
        "[redacted:GITHUB_TOKEN] [redacted:A_SECRET] [redacted:DATABASE_URL] /home/someone/.dsh \
         [redacted:DSH_MCP_TOKEN] 1234567 plain-but-named /usr/local/bin:/usr/bin"
    );
    let named =
        Redactor::from_env(&ambient, false, &["PLAIN".to_owned(), "DSH_HOME".to_owned()]).expect("redactor");
    assert_eq!(
        String::from_utf8_lossy(&named.redact(text)),
        "ghp_secretvalue123 shared-secret-value postgres://u:pw@h/db [redacted:DSH_HOME] \
         mcp-token-value 1234567 [redacted:PLAIN] /usr/local/bin:/usr/bin"
    );
    assert!(Redactor::from_env(&ambient, false, &["UNSET".to_owned()]).expect("redactor").is_empty());
}

#[test]
fn many_values_across_prefilter_groups_and_past_them() {
    for count in [130, 300, PACKED_GROUP * PACKED_MAX_GROUPS + 1] {
        let values: Vec<(String, String)> =
            (0..count).map(|i| (format!("V{i}"), format!("value-{i:05}-{}", i * 7919 % 1000))).collect();
        let r =
            Arc::new(Redactor::new(values.iter().map(|(n, v)| (n.as_str(), v.as_str()))).expect("redactor"));
        assert_eq!(r.len(), count);
        assert_eq!(r.packed.is_empty(), count > PACKED_GROUP * PACKED_MAX_GROUPS, "{count}");
        let mut input = String::new();
        for i in (0..count).step_by(37) {
            input.push_str(&format!("line {i}: {} and value-{i:05} alone\n", values[i].1));
        }
        input.push_str(&values[count - 1].1);
        let pairs: Vec<(&str, &str)> = values.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let expected = reference(&pairs, input.as_bytes());
        assert!(String::from_utf8_lossy(&expected).contains(&format!("[redacted:V{}]", count - 1)));
        let chunks: Vec<&[u8]> = input.as_bytes().chunks(13).collect();
        assert_eq!(streamed(&r, &chunks), expected, "{count} values");
        assert_eq!(r.redact(input.as_bytes()).as_ref(), expected.as_slice());
    }
}

#[test]
fn a_host_name_is_redacted_whatever_its_case() {
    let r = redactor(&[("SECRET_X", "AbCdEf123456"), ("OTHER", "zzzzzzzzzz")]);
    assert_eq!(
        r.redact_ignoring_ascii_case("abcdef123456.example.invalid:443").expect("redact"),
        "[redacted:SECRET_X].example.invalid:443"
    );
    assert_eq!(r.redact_ignoring_ascii_case("ABCDEF123456").expect("redact"), "[redacted:SECRET_X]");
    assert!(matches!(r.redact_ignoring_ascii_case("example.com:443").expect("redact"), Cow::Borrowed(_)));
    let empty = Redactor::empty();
    assert_eq!(empty.redact_ignoring_ascii_case("abcdef123456").expect("redact"), "abcdef123456");
}
