//! Splits a filter or PATCH path into tokens, each with its 1-based character position.

use super::SyntaxError;

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// `(`
    OpenParen,
    /// `)`
    CloseParen,
    /// `[`
    OpenBracket,
    /// `]`
    CloseBracket,
    /// A `.` outside a word: the sub-attribute after a value filter, `emails[…].value`.
    Dot,
    /// An attribute path, an operator, a keyword or `true`/`false`/`null`.
    Word(String),
    /// A JSON string, unescaped.
    String(String),
    /// A JSON number.
    Number(serde_json::Number),
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    /// 1-based character position in the input.
    pub position: usize,
}

fn is_word_start(character: char) -> bool {
    character.is_ascii_alphabetic() || character == '$'
}

fn is_word_char(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '_' | '-' | ':' | '.' | '$')
}

fn is_number_char(character: char) -> bool {
    character.is_ascii_digit() || matches!(character, '-' | '+' | '.' | 'e' | 'E')
}

/// Splits `input` into tokens. Whitespace separates tokens and is otherwise ignored.
pub(crate) fn tokenize(input: &str) -> Result<Vec<Token>, SyntaxError> {
    let characters: Vec<(usize, char)> = input.char_indices().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < characters.len() {
        let character = characters[index].1;
        let position = index + 1;
        let single = match character {
            '(' => Some(TokenKind::OpenParen),
            ')' => Some(TokenKind::CloseParen),
            '[' => Some(TokenKind::OpenBracket),
            ']' => Some(TokenKind::CloseBracket),
            '.' => Some(TokenKind::Dot),
            _ => None,
        };
        if let Some(kind) = single {
            tokens.push(Token { kind, position });
            index += 1;
        } else if character.is_whitespace() {
            index += 1;
        } else if character == '"' {
            let (value, next) = string_literal(input, &characters, index)?;
            tokens.push(Token {
                kind: TokenKind::String(value),
                position,
            });
            index = next;
        } else if character.is_ascii_digit() || character == '-' {
            let end = scan(&characters, index, is_number_char);
            let text = slice(input, &characters, index, end);
            let number = serde_json::from_str::<serde_json::Number>(text).map_err(|_| {
                SyntaxError::new(format!("'{text}' is not a valid number"), position)
            })?;
            tokens.push(Token {
                kind: TokenKind::Number(number),
                position,
            });
            index = end;
        } else if is_word_start(character) {
            let end = scan(&characters, index, is_word_char);
            let text = slice(input, &characters, index, end);
            tokens.push(Token {
                kind: TokenKind::Word(text.to_owned()),
                position,
            });
            index = end;
        } else {
            return Err(SyntaxError::new(
                format!("unexpected character '{character}'"),
                position,
            ));
        }
    }
    Ok(tokens)
}

fn scan(characters: &[(usize, char)], start: usize, accept: fn(char) -> bool) -> usize {
    let mut end = start + 1;
    while end < characters.len() && accept(characters[end].1) {
        end += 1;
    }
    end
}

fn slice<'a>(input: &'a str, characters: &[(usize, char)], start: usize, end: usize) -> &'a str {
    let from = characters[start].0;
    let to = characters
        .get(end)
        .map_or(input.len(), |(offset, _)| *offset);
    &input[from..to]
}

/// Reads the JSON string starting at `start` (its opening quote); returns it unescaped and
/// the index after its closing quote.
fn string_literal(
    input: &str,
    characters: &[(usize, char)],
    start: usize,
) -> Result<(String, usize), SyntaxError> {
    let position = start + 1;
    let mut index = start + 1;
    while index < characters.len() {
        match characters[index].1 {
            '\\' => index += 2,
            '"' => {
                let text = slice(input, characters, start, index + 1);
                let value = serde_json::from_str::<String>(text).map_err(|_| {
                    SyntaxError::new(
                        "the string has an invalid escape or control character",
                        position,
                    )
                })?;
                return Ok((value, index + 1));
            }
            _ => index += 1,
        }
    }
    Err(SyntaxError::new("the string is not closed", position))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(input: &str) -> Vec<TokenKind> {
        tokenize(input)
            .unwrap()
            .into_iter()
            .map(|token| token.kind)
            .collect()
    }

    #[test]
    fn words_strings_numbers_and_punctuation() {
        assert_eq!(
            kinds(r#"emails[type eq "work"].value ge -1.5e3"#),
            vec![
                TokenKind::Word("emails".into()),
                TokenKind::OpenBracket,
                TokenKind::Word("type".into()),
                TokenKind::Word("eq".into()),
                TokenKind::String("work".into()),
                TokenKind::CloseBracket,
                TokenKind::Dot,
                TokenKind::Word("value".into()),
                TokenKind::Word("ge".into()),
                TokenKind::Number(serde_json::Number::from_f64(-1500.0).unwrap()),
            ]
        );
    }

    #[test]
    fn urn_qualified_paths_are_one_word() {
        assert_eq!(
            kinds("urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department pr"),
            vec![
                TokenKind::Word(
                    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department".into()
                ),
                TokenKind::Word("pr".into()),
            ]
        );
    }

    #[test]
    fn strings_are_unescaped_as_json() {
        assert_eq!(
            kinds(r#""a \"quoted\" \\ \u00e9\ud83d\ude00 é""#),
            vec![TokenKind::String("a \"quoted\" \\ é😀 é".into())]
        );
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        let tokens = tokenize(r#"displayName eq "Zoë" and x"#).unwrap();
        assert_eq!(tokens[3].position, 22);
    }

    #[test]
    fn bad_lexemes_are_errors_with_positions() {
        let error = tokenize(r#"userName eq "open"#).unwrap_err();
        assert_eq!(error.position, 13);
        assert!(error.message.contains("not closed"));
        let error = tokenize("userName eq 'x'").unwrap_err();
        assert_eq!(error.position, 13);
        let error = tokenize("a eq 1.2.3").unwrap_err();
        assert!(error.message.contains("not a valid number"));
        let error = tokenize("a eq \"\\q\"").unwrap_err();
        assert!(error.message.contains("escape"));
    }
}
