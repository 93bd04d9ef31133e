//! x
#[cfg(test)]
mod probe {
    #[test]
    fn probe() {
        let src = "[agent]\nmax_steps = 5\n\n[[plugin]]\nid = \"fs\"\n[plugin.grant]\ndirs = [\"a\"]\n[[plugin]]\nid = \"t\"\nconfig = { a.b = 1 }\n";
        let t = toml::de::DeTable::parse(src).unwrap();
        fn dump(t: &toml::de::DeTable, src: &str, ind: usize) {
            for (k, v) in t.iter() {
                println!("{:ind$}{} key={:?} val={:?} {:?}", "", k.get_ref(), k.span(), v.span(), &src[v.span()].chars().take(20).collect::<String>(), ind = ind);
                match v.get_ref() {
                    toml::de::DeValue::Table(t) => dump(t, src, ind + 2),
                    toml::de::DeValue::Array(a) => for e in a.iter() {
                        println!("{:ind$} elem {:?}", "", e.span(), ind = ind);
                        if let toml::de::DeValue::Table(t) = e.get_ref() { dump(t, src, ind + 4) }
                    },
                    _ => {}
                }
            }
        }
        dump(t.get_ref(), src, 0);
        for bad in ["agent\nx=1", "[agent]\nx = 1\nx = 2\n", "a = \"unterminated\n", "a = [1,\n", "[a]\n[a]\n", "a = 1 2"] {
            let e = toml::de::DeTable::parse(bad).unwrap_err();
            println!("{:?} -> {:?} {:?}", bad, e.message(), e.span());
        }
        for v in ["5", "abc", "\"x\"", "[\"a\",\"b\"]", "{a=1}", "", " 5 ", "1979-05-27"] {
            println!("{:?} -> {:?}", v, toml::de::DeValue::parse(v).map(|v| v.into_inner()));
        }
        panic!();
    }
}
