//! xAPI statements (IEEE 9274.1.1, xAPI 2.0, and xAPI 1.0.3) as Flow receives them from learning
//! content: the validation the specification asks of an LRS ([`validate`]: a malformed statement
//! is refused whole, naming where), and what Flow reads from a valid one ([`Reading`]: the
//! learner, the verb, the activity, the registration and the result).
//!
//! The rules are checked over the JSON itself rather than through typed structs with
//! `deny_unknown_fields`: an LRS must tell apart "unknown property", "wrong type" and "out of
//! range" everywhere, and must keep the statement exactly as sent (extensions are free JSON).

use chrono::{DateTime, FixedOffset};
use serde_json::{Map, Value};

use crate::Invalid;

/// The versions of `X-Experience-API-Version` Flow accepts (`2.0` also as `2.0.0`).
pub const VERSIONS: [&str; 2] = ["1.0.3", "2.0.0"];

/// Whether `header` (the `X-Experience-API-Version` value) names a version Flow speaks.
pub fn version_supported(header: &str) -> bool {
    matches!(header.trim(), "1.0.3" | "2.0" | "2.0.0")
}

type Checked = Result<(), Invalid>;

fn fail(path: &str, problem: &str) -> Invalid {
    Invalid(format!("{path} {problem}"))
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, Invalid> {
    value
        .as_object()
        .ok_or_else(|| fail(path, "must be an object"))
}

fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str, Invalid> {
    value.as_str().ok_or_else(|| fail(path, "must be a string"))
}

/// Refuses the properties of `map` that are not in `allowed` (the specification's "an LRS
/// rejects a statement with a property it does not define").
fn only(map: &Map<String, Value>, path: &str, allowed: &[&str]) -> Checked {
    match map.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(fail(&format!("{path}.{key}"), "is not a property of it")),
        None => Ok(()),
    }
}

/// An absolute IRI: a scheme (a letter, then letters, digits, `+`, `-`, `.`), a colon, and no
/// whitespace or characters IRIs exclude.
pub fn is_iri(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    scheme_ok
        && !rest.is_empty()
        && !text.chars().any(|c| {
            c.is_whitespace()
                || c.is_control()
                || matches!(c, '<' | '>' | '"' | '{' | '}' | '|' | '\\' | '^' | '`')
        })
}

fn iri(value: &Value, path: &str) -> Checked {
    if is_iri(string(value, path)?) {
        Ok(())
    } else {
        Err(fail(path, "must be an absolute IRI"))
    }
}

/// A UUID in its standard hyphenated form (RFC 4122).
pub fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(index, c)| match index {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn uuid(value: &Value, path: &str) -> Checked {
    if is_uuid(string(value, path)?) {
        Ok(())
    } else {
        Err(fail(
            path,
            "must be a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
        ))
    }
}

fn boolean(value: &Value, path: &str) -> Checked {
    value
        .as_bool()
        .map(|_| ())
        .ok_or_else(|| fail(path, "must be true or false"))
}

fn number(value: &Value, path: &str) -> Result<f64, Invalid> {
    value.as_f64().ok_or_else(|| fail(path, "must be a number"))
}

/// A timestamp: ISO 8601 with a time zone (RFC 3339); the offset `-00:00` ("unknown") is refused
/// as the specification asks.
pub fn parse_timestamp(text: &str) -> Option<DateTime<FixedOffset>> {
    if text.ends_with("-00:00") || text.ends_with("-0000") || text.ends_with("-00") {
        return None;
    }
    DateTime::parse_from_rfc3339(text).ok()
}

fn timestamp(value: &Value, path: &str) -> Checked {
    parse_timestamp(string(value, path)?)
        .map(|_| ())
        .ok_or_else(|| fail(path, "must be an ISO 8601 timestamp with a time zone"))
}

/// An ISO 8601 duration (`P1DT2H3M4.5S`, `PT16559.14S`, `P2W`) as seconds: years as 365 days,
/// months as 30 days (content sends hours, minutes and seconds in practice).
pub fn parse_duration(text: &str) -> Option<f64> {
    let rest = text.strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return None,
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut seconds = units(
        date,
        &[
            ('Y', 365.0 * 86_400.0),
            ('M', 30.0 * 86_400.0),
            ('W', 7.0 * 86_400.0),
            ('D', 86_400.0),
        ],
    )?;
    if let Some(time) = time {
        seconds += units(time, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    Some(seconds)
}

/// The sum of `number unit` pairs of `text`, units in the order of `scale`, each at most once;
/// only the last may have a fraction.
fn units(text: &str, scale: &[(char, f64)]) -> Option<f64> {
    let mut total = 0.0;
    let mut next = 0;
    let mut number = String::new();
    let mut fraction_seen = false;
    for c in text.chars() {
        if c.is_ascii_digit() || c == '.' || c == ',' {
            number.push(if c == ',' { '.' } else { c });
            continue;
        }
        let position = scale[next..].iter().position(|(unit, _)| *unit == c)? + next;
        if number.is_empty() || number.starts_with('.') || number.ends_with('.') || fraction_seen {
            return None;
        }
        fraction_seen = number.contains('.');
        total += number.parse::<f64>().ok()? * scale[position].1;
        number.clear();
        next = position + 1;
    }
    number.is_empty().then_some(total)
}

fn language_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.split('-').all(|part| {
            (1..=8).contains(&part.len()) && part.chars().all(|c| c.is_ascii_alphanumeric())
        })
}

fn language_map(value: &Value, path: &str) -> Checked {
    for (tag, text) in object(value, path)? {
        if !language_tag(tag) {
            return Err(fail(
                &format!("{path}.{tag}"),
                "is not a language tag (RFC 5646)",
            ));
        }
        string(text, &format!("{path}.{tag}"))?;
    }
    Ok(())
}

fn extensions(value: &Value, path: &str) -> Checked {
    for key in object(value, path)?.keys() {
        if !is_iri(key) {
            return Err(fail(
                &format!("{path}.{key}"),
                "must be keyed by an absolute IRI",
            ));
        }
    }
    Ok(())
}

fn object_type<'a>(map: &'a Map<String, Value>, path: &str) -> Result<Option<&'a str>, Invalid> {
    map.get("objectType")
        .map(|value| string(value, &format!("{path}.objectType")))
        .transpose()
}

/// The inverse functional identifiers of an agent or group that are present, each checked.
fn identifiers(map: &Map<String, Value>, path: &str) -> Result<usize, Invalid> {
    let mut count = 0;
    if let Some(mbox) = map.get("mbox") {
        let text = string(mbox, &format!("{path}.mbox"))?;
        let address = text.strip_prefix("mailto:").unwrap_or_default();
        let (local, domain) = address.split_once('@').unwrap_or_default();
        if local.is_empty() || domain.is_empty() || address.chars().any(char::is_whitespace) {
            return Err(fail(
                &format!("{path}.mbox"),
                "must be mailto: and an e-mail address",
            ));
        }
        count += 1;
    }
    if let Some(sum) = map.get("mbox_sha1sum") {
        let text = string(sum, &format!("{path}.mbox_sha1sum"))?;
        if text.len() != 40 || !text.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(fail(
                &format!("{path}.mbox_sha1sum"),
                "must be 40 hexadecimal digits",
            ));
        }
        count += 1;
    }
    if let Some(openid) = map.get("openid") {
        iri(openid, &format!("{path}.openid"))?;
        count += 1;
    }
    if let Some(account) = map.get("account") {
        let path = format!("{path}.account");
        let account = object(account, &path)?;
        only(account, &path, &["homePage", "name"])?;
        iri(
            account
                .get("homePage")
                .ok_or_else(|| fail(&path, "needs homePage"))?,
            &format!("{path}.homePage"),
        )?;
        string(
            account
                .get("name")
                .ok_or_else(|| fail(&path, "needs name"))?,
            &format!("{path}.name"),
        )?;
        count += 1;
    }
    Ok(count)
}

const AGENT_PROPERTIES: [&str; 6] = [
    "objectType",
    "name",
    "mbox",
    "mbox_sha1sum",
    "openid",
    "account",
];

fn agent(map: &Map<String, Value>, path: &str) -> Checked {
    only(map, path, &AGENT_PROPERTIES)?;
    if let Some(name) = map.get("name") {
        string(name, &format!("{path}.name"))?;
    }
    if identifiers(map, path)? != 1 {
        return Err(fail(
            path,
            "must have exactly one of mbox, mbox_sha1sum, openid, account",
        ));
    }
    Ok(())
}

fn group(map: &Map<String, Value>, path: &str) -> Checked {
    only(map, path, &[&AGENT_PROPERTIES[..], &["member"]].concat())?;
    if let Some(name) = map.get("name") {
        string(name, &format!("{path}.name"))?;
    }
    let identified = identifiers(map, path)?;
    if identified > 1 {
        return Err(fail(
            path,
            "must have at most one of mbox, mbox_sha1sum, openid, account",
        ));
    }
    match map.get("member") {
        None if identified == 0 => Err(fail(path, "is anonymous and needs member")),
        None => Ok(()),
        Some(members) => {
            let members = members
                .as_array()
                .ok_or_else(|| fail(&format!("{path}.member"), "must be an array"))?;
            for (index, member) in members.iter().enumerate() {
                let path = format!("{path}.member[{index}]");
                let member = object(member, &path)?;
                if object_type(member, &path)?.is_some_and(|kind| kind != "Agent") {
                    return Err(fail(&path, "must be an Agent"));
                }
                agent(member, &path)?;
            }
            Ok(())
        }
    }
}

/// An actor: an Agent (objectType absent or `Agent`) or a Group.
fn actor(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    match object_type(map, path)? {
        None | Some("Agent") => agent(map, path),
        Some("Group") => group(map, path),
        Some(_) => Err(fail(
            &format!("{path}.objectType"),
            "must be Agent or Group",
        )),
    }
}

fn verb(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    only(map, path, &["id", "display"])?;
    iri(
        map.get("id").ok_or_else(|| fail(path, "needs id"))?,
        &format!("{path}.id"),
    )?;
    if let Some(display) = map.get("display") {
        language_map(display, &format!("{path}.display"))?;
    }
    Ok(())
}

const INTERACTION_TYPES: [&str; 10] = [
    "true-false",
    "choice",
    "fill-in",
    "long-fill-in",
    "matching",
    "performance",
    "sequencing",
    "likert",
    "numeric",
    "other",
];

fn interaction_components(value: &Value, path: &str) -> Checked {
    let items = value
        .as_array()
        .ok_or_else(|| fail(path, "must be an array"))?;
    let mut seen = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let map = object(item, &path)?;
        only(map, &path, &["id", "description"])?;
        let id = string(
            map.get("id").ok_or_else(|| fail(&path, "needs id"))?,
            &format!("{path}.id"),
        )?;
        if seen.contains(&id) {
            return Err(fail(&format!("{path}.id"), "repeats an id of the list"));
        }
        seen.push(id);
        if let Some(description) = map.get("description") {
            language_map(description, &format!("{path}.description"))?;
        }
    }
    Ok(())
}

fn definition(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    only(
        map,
        path,
        &[
            "name",
            "description",
            "type",
            "moreInfo",
            "extensions",
            "interactionType",
            "correctResponsesPattern",
            "choices",
            "scale",
            "source",
            "target",
            "steps",
        ],
    )?;
    for field in ["name", "description"] {
        if let Some(value) = map.get(field) {
            language_map(value, &format!("{path}.{field}"))?;
        }
    }
    for field in ["type", "moreInfo"] {
        if let Some(value) = map.get(field) {
            iri(value, &format!("{path}.{field}"))?;
        }
    }
    if let Some(value) = map.get("extensions") {
        extensions(value, &format!("{path}.extensions"))?;
    }
    let interaction = map
        .get("interactionType")
        .map(|value| string(value, &format!("{path}.interactionType")))
        .transpose()?;
    if interaction.is_some_and(|kind| !INTERACTION_TYPES.contains(&kind)) {
        return Err(fail(
            &format!("{path}.interactionType"),
            "is not an interaction type",
        ));
    }
    if let Some(pattern) = map.get("correctResponsesPattern") {
        let items = pattern.as_array().ok_or_else(|| {
            fail(
                &format!("{path}.correctResponsesPattern"),
                "must be an array",
            )
        })?;
        for (index, item) in items.iter().enumerate() {
            string(item, &format!("{path}.correctResponsesPattern[{index}]"))?;
        }
    }
    for field in ["choices", "scale", "source", "target", "steps"] {
        if let Some(value) = map.get(field) {
            if interaction.is_none() {
                return Err(fail(&format!("{path}.{field}"), "needs interactionType"));
            }
            interaction_components(value, &format!("{path}.{field}"))?;
        }
    }
    if interaction.is_none() && map.contains_key("correctResponsesPattern") {
        return Err(fail(
            &format!("{path}.correctResponsesPattern"),
            "needs interactionType",
        ));
    }
    Ok(())
}

fn activity(map: &Map<String, Value>, path: &str) -> Checked {
    only(map, path, &["objectType", "id", "definition"])?;
    iri(
        map.get("id").ok_or_else(|| fail(path, "needs id"))?,
        &format!("{path}.id"),
    )?;
    if let Some(value) = map.get("definition") {
        definition(value, &format!("{path}.definition"))?;
    }
    Ok(())
}

fn statement_ref(map: &Map<String, Value>, path: &str) -> Checked {
    only(map, path, &["objectType", "id"])?;
    if object_type(map, path)? != Some("StatementRef") {
        return Err(fail(&format!("{path}.objectType"), "must be StatementRef"));
    }
    uuid(
        map.get("id").ok_or_else(|| fail(path, "needs id"))?,
        &format!("{path}.id"),
    )
}

/// The object of a statement (or of a sub-statement: `nested`, where another SubStatement is
/// refused).
fn statement_object(value: &Value, path: &str, nested: bool) -> Checked {
    let map = object(value, path)?;
    match object_type(map, path)? {
        None | Some("Activity") => activity(map, path),
        Some("Agent") => agent(map, path),
        Some("Group") => group(map, path),
        Some("StatementRef") => statement_ref(map, path),
        Some("SubStatement") if nested => Err(fail(path, "cannot nest a SubStatement")),
        Some("SubStatement") => sub_statement(map, path),
        Some(_) => Err(fail(
            &format!("{path}.objectType"),
            "must be Activity, Agent, Group, StatementRef or SubStatement",
        )),
    }
}

fn sub_statement(map: &Map<String, Value>, path: &str) -> Checked {
    only(
        map,
        path,
        &[
            "objectType",
            "actor",
            "verb",
            "object",
            "result",
            "context",
            "timestamp",
            "attachments",
        ],
    )?;
    body(map, path, true)
}

fn score(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    only(map, path, &["scaled", "raw", "min", "max"])?;
    let get = |field: &str| {
        map.get(field)
            .map(|value| number(value, &format!("{path}.{field}")))
            .transpose()
    };
    let (scaled, raw, min, max) = (get("scaled")?, get("raw")?, get("min")?, get("max")?);
    if scaled.is_some_and(|scaled| !(-1.0..=1.0).contains(&scaled)) {
        return Err(fail(&format!("{path}.scaled"), "must be between -1 and 1"));
    }
    if let (Some(min), Some(max)) = (min, max)
        && min >= max
    {
        return Err(fail(&format!("{path}.min"), "must be less than max"));
    }
    if let Some(raw) = raw
        && (min.is_some_and(|min| raw < min) || max.is_some_and(|max| raw > max))
    {
        return Err(fail(&format!("{path}.raw"), "must be between min and max"));
    }
    Ok(())
}

fn result(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    only(
        map,
        path,
        &[
            "score",
            "success",
            "completion",
            "response",
            "duration",
            "extensions",
        ],
    )?;
    if let Some(value) = map.get("score") {
        score(value, &format!("{path}.score"))?;
    }
    for field in ["success", "completion"] {
        if let Some(value) = map.get(field) {
            boolean(value, &format!("{path}.{field}"))?;
        }
    }
    if let Some(value) = map.get("response") {
        string(value, &format!("{path}.response"))?;
    }
    if let Some(value) = map.get("duration") {
        let path = format!("{path}.duration");
        parse_duration(string(value, &path)?)
            .ok_or_else(|| fail(&path, "must be an ISO 8601 duration (PT1H30M)"))?;
    }
    if let Some(value) = map.get("extensions") {
        extensions(value, &format!("{path}.extensions"))?;
    }
    Ok(())
}

fn context_activities(value: &Value, path: &str) -> Checked {
    let map = object(value, path)?;
    only(map, path, &["parent", "grouping", "category", "other"])?;
    for (key, value) in map {
        let path = format!("{path}.{key}");
        let items: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        for (index, item) in items.into_iter().enumerate() {
            let path = format!("{path}[{index}]");
            let item = object(item, &path)?;
            if object_type(item, &path)?.is_some_and(|kind| kind != "Activity") {
                return Err(fail(&path, "must be an Activity"));
            }
            activity(item, &path)?;
        }
    }
    Ok(())
}

fn context(value: &Value, path: &str, object_is_activity: bool) -> Checked {
    let map = object(value, path)?;
    only(
        map,
        path,
        &[
            "registration",
            "instructor",
            "team",
            "contextActivities",
            "revision",
            "platform",
            "language",
            "statement",
            "extensions",
            "contextAgents",
            "contextGroups",
        ],
    )?;
    if let Some(value) = map.get("registration") {
        uuid(value, &format!("{path}.registration"))?;
    }
    if let Some(value) = map.get("instructor") {
        actor(value, &format!("{path}.instructor"))?;
    }
    if let Some(value) = map.get("team") {
        let path = format!("{path}.team");
        let team = object(value, &path)?;
        if object_type(team, &path)? != Some("Group") {
            return Err(fail(&format!("{path}.objectType"), "must be Group"));
        }
        group(team, &path)?;
    }
    if let Some(value) = map.get("contextActivities") {
        context_activities(value, &format!("{path}.contextActivities"))?;
    }
    for field in ["revision", "platform"] {
        if let Some(value) = map.get(field) {
            string(value, &format!("{path}.{field}"))?;
            if !object_is_activity {
                return Err(fail(
                    &format!("{path}.{field}"),
                    "is only for a statement about an Activity",
                ));
            }
        }
    }
    if let Some(value) = map.get("language") {
        let path = format!("{path}.language");
        if !language_tag(string(value, &path)?) {
            return Err(fail(&path, "is not a language tag (RFC 5646)"));
        }
    }
    if let Some(value) = map.get("statement") {
        let path = format!("{path}.statement");
        statement_ref(object(value, &path)?, &path)?;
    }
    if let Some(value) = map.get("extensions") {
        extensions(value, &format!("{path}.extensions"))?;
    }
    for field in ["contextAgents", "contextGroups"] {
        if let Some(value) = map.get(field) {
            value
                .as_array()
                .ok_or_else(|| fail(&format!("{path}.{field}"), "must be an array"))?;
        }
    }
    Ok(())
}

fn attachments(value: &Value, path: &str) -> Checked {
    let items = value
        .as_array()
        .ok_or_else(|| fail(path, "must be an array"))?;
    for (index, item) in items.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let map = object(item, &path)?;
        only(
            map,
            &path,
            &[
                "usageType",
                "display",
                "description",
                "contentType",
                "length",
                "sha2",
                "fileUrl",
            ],
        )?;
        let need = |field: &str| {
            map.get(field)
                .ok_or_else(|| fail(&path, &format!("needs {field}")))
        };
        iri(need("usageType")?, &format!("{path}.usageType"))?;
        language_map(need("display")?, &format!("{path}.display"))?;
        if let Some(value) = map.get("description") {
            language_map(value, &format!("{path}.description"))?;
        }
        string(need("contentType")?, &format!("{path}.contentType"))?;
        need("length")?
            .as_u64()
            .ok_or_else(|| fail(&format!("{path}.length"), "must be a whole number"))?;
        string(need("sha2")?, &format!("{path}.sha2"))?;
        if let Some(value) = map.get("fileUrl") {
            iri(value, &format!("{path}.fileUrl"))?;
        }
    }
    Ok(())
}

/// What a statement and a sub-statement share: actor, verb, object, result, context, timestamp,
/// attachments.
fn body(map: &Map<String, Value>, path: &str, nested: bool) -> Checked {
    let need = |field: &str| {
        map.get(field)
            .ok_or_else(|| fail(path, &format!("needs {field}")))
    };
    actor(need("actor")?, &format!("{path}.actor"))?;
    verb(need("verb")?, &format!("{path}.verb"))?;
    let object_value = need("object")?;
    statement_object(object_value, &format!("{path}.object"), nested)?;
    let object_is_activity = object_value
        .get("objectType")
        .is_none_or(|kind| kind == "Activity");
    if let Some(value) = map.get("result") {
        result(value, &format!("{path}.result"))?;
    }
    if let Some(value) = map.get("context") {
        context(value, &format!("{path}.context"), object_is_activity)?;
    }
    if let Some(value) = map.get("timestamp") {
        timestamp(value, &format!("{path}.timestamp"))?;
    }
    if let Some(value) = map.get("attachments") {
        attachments(value, &format!("{path}.attachments"))?;
    }
    Ok(())
}

/// Checks `statement` as an LRS must before storing it; the refusal names the property
/// (`statement.actor.mbox must be mailto: and an e-mail address`).
pub fn validate(statement: &Value) -> Checked {
    let path = "statement";
    let map = object(statement, path)?;
    only(
        map,
        path,
        &[
            "id",
            "actor",
            "verb",
            "object",
            "result",
            "context",
            "timestamp",
            "stored",
            "authority",
            "version",
            "attachments",
            "objectType",
        ],
    )?;
    if let Some(kind) = object_type(map, path)?
        && kind != "Statement"
    {
        return Err(fail(
            "statement.objectType",
            "must be Statement when present",
        ));
    }
    if let Some(value) = map.get("id") {
        uuid(value, "statement.id")?;
    }
    body(map, path, false)?;
    if let Some(value) = map.get("stored") {
        timestamp(value, "statement.stored")?;
    }
    if let Some(value) = map.get("authority") {
        actor(value, "statement.authority")?;
    }
    if let Some(value) = map.get("version") {
        let version = string(value, "statement.version")?;
        if !(version.starts_with("1.0.") || version == "1.0" || version.starts_with("2.0")) {
            return Err(fail(
                "statement.version",
                "must be a 1.0.x or 2.0.x version",
            ));
        }
    }
    Ok(())
}

/// What Flow reads of a valid statement to map it onto progress.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The learner's e-mail: `actor.mbox` without `mailto:`, or `actor.account.name` when it is
    /// an e-mail address.
    pub email: Option<String>,
    /// `verb.id`.
    pub verb: String,
    /// `object.id` when the object is an Activity.
    pub activity: Option<String>,
    /// `context.registration`.
    pub registration: Option<uuid::Uuid>,
    /// `result.score.scaled`.
    pub score: Option<f64>,
    /// `result.success`.
    pub success: Option<bool>,
    /// `result.duration`, in whole seconds.
    pub duration_seconds: Option<i64>,
}

impl Reading {
    /// Reads a statement [`validate`] accepted.
    pub fn of(statement: &Value) -> Self {
        let actor = &statement["actor"];
        let email = actor["mbox"]
            .as_str()
            .and_then(|mbox| mbox.strip_prefix("mailto:"))
            .or_else(|| {
                actor["account"]["name"]
                    .as_str()
                    .filter(|name| name.contains('@'))
            })
            .map(str::to_owned);
        let object = &statement["object"];
        let activity = object["objectType"]
            .as_str()
            .is_none_or(|kind| kind == "Activity")
            .then(|| object["id"].as_str().map(str::to_owned))
            .flatten();
        let result = &statement["result"];
        Self {
            email,
            verb: statement["verb"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            activity,
            registration: statement["context"]["registration"]
                .as_str()
                .and_then(|text| uuid::Uuid::parse_str(text).ok()),
            score: result["score"]["scaled"].as_f64(),
            success: result["success"].as_bool(),
            duration_seconds: result["duration"]
                .as_str()
                .and_then(parse_duration)
                .map(|seconds| seconds.round() as i64),
        }
    }

    /// What the verb does to a module: by the last segment of its IRI, so both the ADL verbs
    /// (`http://adlnet.gov/expapi/verbs/completed`) and cmi5's use of them map.
    pub fn verb_effect(&self) -> VerbEffect {
        let name = self.verb.rsplit(['/', '#', ':']).next().unwrap_or_default();
        match name {
            "launched" | "initialized" | "progressed" | "attempted" | "failed" => {
                VerbEffect::InProgress
            }
            "completed" | "passed" => VerbEffect::Completed,
            "satisfied" => VerbEffect::Satisfied,
            _ => VerbEffect::Nothing,
        }
    }
}

/// What a verb does in Flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerbEffect {
    /// The module is in progress (launched, initialized, progressed, attempted; failed keeps it
    /// in progress with the result).
    InProgress,
    /// The module is completed (completed, passed).
    Completed,
    /// On the flow's own activity: the assignment is completed (satisfied).
    Satisfied,
    /// Nothing Flow maps.
    Nothing,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_iso_8601() {
        assert_eq!(parse_duration("PT1H0M0.1S"), Some(3_600.1));
        assert_eq!(parse_duration("PT16559.14S"), Some(16_559.14));
        assert_eq!(parse_duration("P1DT1M"), Some(86_460.0));
        assert_eq!(parse_duration("P2W"), Some(14.0 * 86_400.0));
        for bad in [
            "PA1H0M0S",
            "P",
            "PT",
            "1H",
            "PT1S1H",
            "PT1.5H2M",
            "should fail",
            "P1H",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn iris_uuids_and_timestamps_follow_their_rules() {
        assert!(is_iri("http://adlnet.gov/expapi/verbs/completed"));
        assert!(is_iri("urn:uuid:1234"));
        assert!(!is_iri("ab=c://should.fail.com"));
        assert!(!is_iri("not an iri"));
        assert!(is_uuid("aa97b177-9383-4934-8543-0f91a7a02836"));
        assert!(!is_uuid("AA97B177-9383-4934-8543-0F91A7A028368"));
        assert!(!is_uuid("MA97B177-9383-4934-8543-0F91A7A02836"));
        assert!(parse_timestamp("2013-05-18T05:32:34.804+00:00").is_some());
        assert!(parse_timestamp("2008-09-15T15:53:00.601-00:00").is_none());
        assert!(parse_timestamp("01/011/2015").is_none());
    }
}
