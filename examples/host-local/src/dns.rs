//! resolv.conf parsing for the result's `dns` (host-local's `parseResolvConf`). The
//! module has no filesystem, so this works on the file's text, which the host supplies.

use wasm_ipam_guest::Dns;

/// Reads `nameserver`, `domain`, `search` and `options` lines; comments (`#`, `;`),
/// blank lines, lines without a value and other keywords are skipped.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with(['#', ';']) {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [keyword, values @ ..] = fields.as_slice() else {
            continue;
        };
        let Some(first) = values.first() else {
            continue;
        };
        let owned = || values.iter().map(|v| v.to_string());
        match *keyword {
            "nameserver" => dns.nameservers.push(first.to_string()),
            "domain" => dns.domain = Some(first.to_string()),
            "search" => dns.search.extend(owned()),
            "options" => dns.options.extend(owned()),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_a_simple_resolv_conf() {
        let dns = parse_resolv_conf("\n\t\tnameserver 192.0.2.0\n\t\tnameserver 192.0.2.1\n\t\t");
        assert_eq!(dns.nameservers, strings(&["192.0.2.0", "192.0.2.1"]));
        assert_eq!(dns.domain, None);
        assert!(dns.search.is_empty() && dns.options.is_empty());
    }

    #[test]
    fn ignores_comments() {
        let dns = parse_resolv_conf("\nnameserver 192.0.2.0\n;nameserver 192.0.2.1\n");
        assert_eq!(dns.nameservers, strings(&["192.0.2.0"]));
    }

    #[test]
    fn parses_all_fields() {
        let dns = parse_resolv_conf(
            "\nnameserver 192.0.2.0\nnameserver 192.0.2.2\ndomain example.com\n;nameserver comment\n\
             #nameserver comment\nsearch example.net example.org\nsearch example.gov\n\
             options one two three\noptions four\n",
        );
        assert_eq!(dns.nameservers, strings(&["192.0.2.0", "192.0.2.2"]));
        assert_eq!(dns.domain.as_deref(), Some("example.com"));
        assert_eq!(
            dns.search,
            strings(&["example.net", "example.org", "example.gov"])
        );
        assert_eq!(dns.options, strings(&["one", "two", "three", "four"]));
    }

    #[test]
    fn skips_keywords_without_values_and_unknown_keywords() {
        let dns = parse_resolv_conf(
            "nameserver\nsortlist 10.0.0.0\r\ndomain a.example\r\ndomain b.example extra\n",
        );
        assert!(dns.nameservers.is_empty());
        assert_eq!(dns.domain.as_deref(), Some("b.example"));
    }
}
