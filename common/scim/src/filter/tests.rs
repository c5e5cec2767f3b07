use super::*;
use crate::ScimType;

fn path(name: &str, sub: Option<&str>) -> AttrPath {
    AttrPath::new(name, sub)
}

fn eq(name: &str, value: &str) -> Filter {
    Filter::Compare {
        path: path(name, None),
        operator: Operator::Equal,
        value: FilterValue::String(value.into()),
    }
}

fn invalid_filter_detail(input: &str) -> String {
    let error = parse(input).unwrap_err();
    assert_eq!(error.scim_type(), Some(ScimType::InvalidFilter), "{input}");
    assert_eq!(error.status(), 400);
    error.detail().to_owned()
}

#[test]
fn okta_user_lookup_by_user_name() {
    // Okta looks a user up before creating it: GET /Users?filter=userName eq "…"&startIndex=1&count=100
    let filter = parse_for(r#"userName eq "test.user@okta.local""#, ResourceType::User).unwrap();
    assert_eq!(filter, eq("userName", "test.user@okta.local"));
}

#[test]
fn entra_lookups_by_user_name_external_id_and_work_email() {
    let filter = parse_for(
        r#"userName eq "Test_User_dfeef4c5-5681-4387-b016-bdf221e82081""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(
        filter.to_string(),
        r#"userName eq "Test_User_dfeef4c5-5681-4387-b016-bdf221e82081""#
    );
    let filter = parse_for(
        r#"externalId eq "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(
        filter,
        eq("externalId", "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef")
    );
    // Entra ID matching on the work e-mail: not RFC 7644 syntax, read as the value filter it means.
    let filter = parse_for(
        r#"emails[type eq "work"].value eq "x@y.z""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(
        filter.to_string(),
        r#"emails[type eq "work" and value eq "x@y.z"]"#
    );
    let filter =
        parse(r#"emails[type eq "work" and primary eq true].value pr or userName eq "a""#).unwrap();
    assert_eq!(
        filter.to_string(),
        r#"emails[type eq "work" and primary eq true and value pr] or userName eq "a""#
    );
    let filter = parse_for(r#"displayName eq "Group A""#, ResourceType::Group).unwrap();
    assert_eq!(filter, eq("displayName", "Group A"));
}

#[test]
fn names_and_operators_are_case_insensitive_and_come_out_canonical() {
    let filter = parse_for(
        r#"USERNAME EQ "A@b.c" And NAME.FAMILYNAME Sw "J""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(
        filter.to_string(),
        r#"userName eq "A@b.c" and name.familyName sw "J""#
    );
    let filter = parse_for(r#"Emails Co "@example.com""#, ResourceType::User).unwrap();
    assert_eq!(filter.to_string(), r#"emails.value co "@example.com""#);
    let filter = parse_for(r#"members eq "usr_1""#, ResourceType::Group).unwrap();
    assert_eq!(filter.to_string(), r#"members.value eq "usr_1""#);
}

#[test]
fn urn_qualified_attributes() {
    let filter = parse(
        r#"urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department eq "Sales""#,
    )
    .unwrap();
    assert_eq!(
        filter,
        Filter::Compare {
            path: AttrPath {
                urn: Some("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User".into()),
                name: "department".into(),
                sub_attribute: None,
            },
            operator: Operator::Equal,
            value: FilterValue::String("Sales".into()),
        }
    );
    // department is not filterable in Flow: the check says so and lists what is.
    let error = check(&filter, ResourceType::User).unwrap_err();
    assert!(
        error.detail().contains("cannot be filtered on"),
        "{}",
        error.detail()
    );
    assert!(error.detail().contains("userName"), "{}", error.detail());
    // Core attributes may carry the core URN; it is dropped.
    let filter = parse_for(
        r#"urn:ietf:params:scim:schemas:core:2.0:User:name.givenName eq "Ann""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(filter.to_string(), r#"name.givenName eq "Ann""#);
}

#[test]
fn every_operator_parses() {
    for (keyword, operator) in [
        ("eq", Operator::Equal),
        ("ne", Operator::NotEqual),
        ("co", Operator::Contains),
        ("sw", Operator::StartsWith),
        ("ew", Operator::EndsWith),
        ("gt", Operator::GreaterThan),
        ("ge", Operator::GreaterOrEqual),
        ("lt", Operator::LessThan),
        ("le", Operator::LessOrEqual),
    ] {
        let filter = parse(&format!(r#"title {} "x""#, keyword.to_uppercase())).unwrap();
        assert_eq!(
            filter,
            Filter::Compare {
                path: path("title", None),
                operator,
                value: FilterValue::String("x".into())
            }
        );
        assert_eq!(operator.keyword(), keyword);
    }
    assert_eq!(
        parse("title pr").unwrap(),
        Filter::Present(path("title", None))
    );
}

#[test]
fn values_strings_numbers_booleans_null() {
    let value = |input: &str| match parse(input).unwrap() {
        Filter::Compare { value, .. } => value,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        value(r#"a eq "x \"y\" \\ \n""#),
        FilterValue::String("x \"y\" \\ \n".into())
    );
    assert_eq!(value("a eq 42"), FilterValue::Number(42.into()));
    assert_eq!(
        value("a gt -0.5e2"),
        FilterValue::Number(serde_json::Number::from_f64(-50.0).unwrap())
    );
    assert_eq!(value("a eq true"), FilterValue::Boolean(true));
    assert_eq!(value("a eq False"), FilterValue::Boolean(false));
    assert_eq!(value("a eq null"), FilterValue::Null);
}

#[test]
fn and_binds_tighter_than_or() {
    let filter = parse(r#"a eq "1" or b eq "2" and c eq "3""#).unwrap();
    assert_eq!(
        filter,
        Filter::Or(vec![
            eq("a", "1"),
            Filter::And(vec![eq("b", "2"), eq("c", "3")])
        ])
    );
    let filter = parse(r#"a eq "1" and b eq "2" or c eq "3""#).unwrap();
    assert_eq!(
        filter,
        Filter::Or(vec![
            Filter::And(vec![eq("a", "1"), eq("b", "2")]),
            eq("c", "3")
        ])
    );
}

#[test]
fn parentheses_group_and_not_negates() {
    let filter = parse(r#"(a eq "1" or b eq "2") and not (c eq "3")"#).unwrap();
    assert_eq!(
        filter,
        Filter::And(vec![
            Filter::Or(vec![eq("a", "1"), eq("b", "2")]),
            Filter::Not(Box::new(eq("c", "3"))),
        ])
    );
    assert_eq!(
        filter.to_string(),
        r#"(a eq "1" or b eq "2") and not (c eq "3")"#
    );
    // Display and parse round-trip.
    assert_eq!(parse(&filter.to_string()).unwrap(), filter);
}

#[test]
fn chains_are_flat() {
    let filter = parse(r#"a eq "1" and b eq "2" and c eq "3" and d eq "4""#).unwrap();
    assert!(matches!(&filter, Filter::And(terms) if terms.len() == 4));
}

#[test]
fn value_paths_with_and_inside() {
    let filter = parse_for(
        r#"emails[type eq "work" and value co "@example.com"] or userName sw "j""#,
        ResourceType::User,
    )
    .unwrap();
    assert_eq!(
        filter,
        Filter::Or(vec![
            Filter::ValuePath {
                path: path("emails", None),
                filter: Box::new(Filter::And(vec![
                    eq("type", "work"),
                    Filter::Compare {
                        path: path("value", None),
                        operator: Operator::Contains,
                        value: FilterValue::String("@example.com".into()),
                    },
                ])),
            },
            Filter::Compare {
                path: path("userName", None),
                operator: Operator::StartsWith,
                value: FilterValue::String("j".into()),
            },
        ])
    );
    let filter = parse_for(r#"members[VALUE eq "usr_1"]"#, ResourceType::Group).unwrap();
    assert_eq!(filter.to_string(), r#"members[value eq "usr_1"]"#);
}

#[test]
fn rfc_examples_parse() {
    for input in [
        r#"userName Eq "john""#,
        r#"name.familyName co "O'Malley""#,
        r#"urn:ietf:params:scim:schemas:core:2.0:User:userName sw "J""#,
        "title pr",
        r#"meta.lastModified gt "2011-05-13T04:42:34Z""#,
        r#"meta.lastModified ge "2011-05-13T04:42:34Z""#,
        r#"meta.lastModified lt "2011-05-13T04:42:34Z""#,
        r#"meta.lastModified le "2011-05-13T04:42:34Z""#,
        r#"title pr and userType eq "Employee""#,
        r#"title pr or userType eq "Intern""#,
        r#"schemas eq "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User""#,
        r#"userType eq "Employee" and (emails co "example.com" or emails.value co "example.org")"#,
        r#"userType ne "Employee" and not (emails co "example.com" or emails.value co "example.org")"#,
        r#"userType eq "Employee" and (emails.type eq "work")"#,
        r#"userType eq "Employee" and emails[type eq "work" and value co "@example.com"]"#,
        r#"emails[type eq "work" and value co "@example.com"] or ims[type eq "xmpp" and value co "@foo.com"]"#,
    ] {
        let filter = parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(parse(&filter.to_string()).unwrap(), filter, "{input}");
    }
}

#[test]
fn user_filterable_attributes_are_the_declared_set() {
    assert_eq!(
        filterable_paths(ResourceType::User),
        vec![
            "userName",
            "name.familyName",
            "name.givenName",
            "displayName",
            "active",
            "emails.value",
            "emails.type",
            "id",
            "externalId",
            "meta.lastModified",
        ]
    );
    assert_eq!(
        filterable_paths(ResourceType::Group),
        vec![
            "displayName",
            "members.value",
            "id",
            "externalId",
            "meta.lastModified"
        ]
    );
    for input in [
        r#"id eq "usr_1""#,
        "active eq false",
        r#"emails.type eq "work""#,
        r#"name.givenName eq "A""#,
        r#"meta.lastModified gt "2026-01-01T00:00:00Z""#,
        "externalId pr",
    ] {
        parse_for(input, ResourceType::User).unwrap_or_else(|error| panic!("{input}: {error}"));
    }
}

#[test]
fn unknown_or_unfilterable_attributes_are_invalid_filter() {
    for (input, resource, expected) in [
        (
            r#"nickName eq "x""#,
            ResourceType::User,
            "unknown attribute 'nickName'",
        ),
        (
            r#"title eq "x""#,
            ResourceType::User,
            "'title' cannot be filtered on",
        ),
        (
            r#"userName eq "x""#,
            ResourceType::Group,
            "unknown attribute 'userName'",
        ),
        (r#"name eq "x""#, ResourceType::User, "'name' is complex"),
        (
            r#"name.middleName eq "x""#,
            ResourceType::User,
            "no sub-attribute 'middleName'",
        ),
        (
            r#"userName.value eq "x""#,
            ResourceType::User,
            "has no sub-attributes",
        ),
        (
            r#"emails[primary eq true]"#,
            ResourceType::User,
            "'emails.primary' cannot be filtered on",
        ),
        (
            r#"emails[bogus eq "x"]"#,
            ResourceType::User,
            "'bogus' is not a sub-attribute of 'emails'",
        ),
        (
            r#"userName[value eq "x"]"#,
            ResourceType::User,
            "not a multi-valued attribute",
        ),
        (
            r#"urn:example:custom:1.0:User:x eq "y""#,
            ResourceType::User,
            "unknown attribute",
        ),
    ] {
        let error = parse_for(input, resource).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidFilter), "{input}");
        assert!(
            error.detail().contains(expected),
            "{input}: {}",
            error.detail()
        );
    }
}

#[test]
fn comparisons_must_suit_the_attribute_type() {
    for (input, expected) in [
        (r#"active co "t""#, "is a boolean; use eq, ne or pr"),
        (r#"active eq "true""#, "compare it with true or false"),
        (r#"meta.lastModified co "2026""#, "is a date-time"),
        (r#"meta.lastModified gt "yesterday""#, "RFC 3339 timestamp"),
        ("userName eq 42", "compare it with a string"),
        ("userName eq null", "use pr to test presence"),
    ] {
        let error = parse_for(input, ResourceType::User).unwrap_err();
        assert_eq!(error.scim_type(), Some(ScimType::InvalidFilter), "{input}");
        assert!(
            error.detail().contains(expected),
            "{input}: {}",
            error.detail()
        );
    }
}

#[test]
fn syntax_errors_say_what_and_where() {
    let cases = [
        ("", "the filter is empty (at character 1)"),
        ("   ", "the filter is empty (at character 1)"),
        (
            "userName",
            "expected an operator after 'userName', but the input ended (at character 9)",
        ),
        (
            r#"userName equals "x""#,
            "'equals' is not an operator; expected one of eq, ne, co, sw, ew, gt, ge, lt, le, pr after 'userName' (at character 10)",
        ),
        (
            "userName eq",
            "expected a value after 'eq' (a string in double quotes, a number, true, false or null), but the input ended (at character 12)",
        ),
        (
            "userName eq john",
            "expected a value after 'eq' (a string in double quotes, a number, true, false or null), found 'john' (at character 13)",
        ),
        (
            r#"(userName eq "x""#,
            "expected ')', but the input ended (at character 17)",
        ),
        (r#"userName eq "x")"#, "unexpected ')' (at character 16)"),
        (
            r#"userName eq "x" and"#,
            "expected an attribute name, but the input ended (at character 20)",
        ),
        (
            r#"userName eq "x" userName"#,
            "unexpected 'userName' (at character 17)",
        ),
        (
            r#"emails[type eq "work""#,
            "expected ']', but the input ended (at character 22)",
        ),
        (
            r#"emails[type eq "w"].value"#,
            "expected an operator after 'value', but the input ended (at character 26)",
        ),
        (
            r#"emails[type eq "w"]. "x""#,
            "expected an attribute name, found the string \"x\" (at character 22)",
        ),
        (
            r#"emails[type eq "w"].value[x eq "1"]"#,
            "value filters cannot be nested (at character 26)",
        ),
        (
            r#"userName.x.y eq "x""#,
            "'userName.x.y' is not an attribute path: at most one sub-attribute may follow the name (at character 1)",
        ),
        (
            r#"(userName eq "x").value eq "y""#,
            "unexpected '.' (at character 18)",
        ),
        (
            r#"emails[x[y eq "1"]]"#,
            "value filters cannot be nested (at character 9)",
        ),
        (
            r#"emails.value[type eq "w"]"#,
            "a value filter must follow a multi-valued attribute, not the sub-attribute 'emails.value' (at character 13)",
        ),
        (
            r#"a.b.c eq "x""#,
            "'a.b.c' is not an attribute path: at most one sub-attribute may follow the name (at character 1)",
        ),
        (
            r#"foo:bar eq "x""#,
            "'foo:bar' is not an attribute path: a schema prefix must be a URN (urn:…) (at character 1)",
        ),
        (
            r#"userName eq "x" & b"#,
            "unexpected character '&' (at character 17)",
        ),
        (
            r#"userName eq "unterminated"#,
            "the string is not closed (at character 13)",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            invalid_filter_detail(input),
            format!("invalid filter: {expected}"),
            "{input}"
        );
    }
}

#[test]
fn length_limit_names_the_limit() {
    let long = format!(r#"userName eq "{}""#, "x".repeat(MAX_FILTER_LENGTH));
    let detail = invalid_filter_detail(&long);
    assert_eq!(
        detail,
        format!(
            "the filter is {} characters long; at most 4096 are accepted",
            MAX_FILTER_LENGTH + 14
        )
    );
    let fits = format!(r#"userName eq "{}""#, "x".repeat(MAX_FILTER_LENGTH - 14));
    assert!(parse(&fits).is_ok());
}

#[test]
fn depth_limit_names_the_limit() {
    let nested = |levels: usize| {
        format!(
            r#"{}userName eq "x"{}"#,
            "(".repeat(levels),
            ")".repeat(levels)
        )
    };
    assert!(parse(&nested(MAX_FILTER_DEPTH)).is_ok());
    let detail = invalid_filter_detail(&nested(MAX_FILTER_DEPTH + 1));
    assert_eq!(
        detail,
        "invalid filter: the filter nests deeper than 32 levels (at character 33)"
    );
    let nots = format!(r#"{}userName eq "x""#, "not ".repeat(1000));
    assert!(invalid_filter_detail(&nots).contains("nests deeper than 32 levels"));
    // Long flat chains are not nesting.
    let chain = vec![r#"a eq "1""#; 300].join(" and ");
    assert!(parse(&chain).is_ok());
}

#[test]
fn garbled_and_truncated_filters_never_panic() {
    let seeds = [
        r#"emails[type eq "work" and value co "@example.com"] or (userName sw "j" and not (active eq false))"#,
        r#"urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager.value eq "\u00e9\"x""#,
        r#"meta.lastModified gt "2011-05-13T04:42:34Z" and members[value eq "a"]"#,
    ];
    let noise = [
        '(', ')', '[', ']', '"', '\\', '.', ':', ' ', 'é', '-', '1', 'e', '\u{0}',
    ];
    let mut checked = 0;
    for seed in seeds {
        let characters: Vec<char> = seed.chars().collect();
        for cut in 0..=characters.len() {
            let truncated: String = characters[..cut].iter().collect();
            let _ = parse_for(&truncated, ResourceType::User);
            let _ = parse_for(&truncated, ResourceType::Group);
            for (index, replacement) in noise.iter().enumerate() {
                let mut garbled = characters.clone();
                if cut < garbled.len() {
                    garbled[cut] = *replacement;
                }
                garbled.insert((cut + index) % (garbled.len() + 1), *replacement);
                let garbled: String = garbled.into_iter().collect();
                if let Ok(filter) = parse(&garbled) {
                    // Whatever parses prints as text that parses to the same filter.
                    assert_eq!(parse(&filter.to_string()).unwrap(), filter, "{garbled}");
                }
                let _ = parse_for(&garbled, ResourceType::User);
                checked += 1;
            }
        }
    }
    assert!(checked > 1000);
}
