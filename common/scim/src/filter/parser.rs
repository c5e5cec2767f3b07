//! A recursive-descent parser for RFC 7644 §3.4.2.2 filters. Precedence, loosest first:
//! `or`, `and`, `not` / parentheses / value filters. Nesting (parentheses, brackets and `not`)
//! is bounded by [`MAX_FILTER_DEPTH`](crate::filter::MAX_FILTER_DEPTH).

use super::lexer::{Token, TokenKind};
use super::{AttrPath, Filter, FilterValue, MAX_FILTER_DEPTH, Operator, SyntaxError};

/// The parser's cursor over the tokens of one input.
pub(crate) struct Parser {
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
    end_position: usize,
}

impl Parser {
    /// A parser over `tokens` of an input `length` characters long.
    pub(crate) fn new(tokens: Vec<Token>, length: usize) -> Self {
        Self {
            tokens,
            next: 0,
            depth: 0,
            end_position: length + 1,
        }
    }

    /// The next token, without consuming it.
    pub(crate) fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    /// Consumes and returns the next token.
    pub(crate) fn advance(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).cloned();
        if token.is_some() {
            self.next += 1;
        }
        token
    }

    /// Where the next token starts (or the end of the input).
    pub(crate) fn position(&self) -> usize {
        self.peek()
            .map_or(self.end_position, |token| token.position)
    }

    /// An error at the next token, naming it.
    pub(crate) fn unexpected(&self, expected: &str) -> SyntaxError {
        match self.peek() {
            Some(token) => SyntaxError::new(
                format!("expected {expected}, found {}", describe(&token.kind)),
                token.position,
            ),
            None => SyntaxError::new(
                format!("expected {expected}, but the input ended"),
                self.end_position,
            ),
        }
    }

    /// Fails unless every token was consumed.
    pub(crate) fn expect_end(&self) -> Result<(), SyntaxError> {
        match self.peek() {
            None => Ok(()),
            Some(token) => Err(SyntaxError::new(
                format!("unexpected {}", describe(&token.kind)),
                token.position,
            )),
        }
    }

    fn is_keyword(&self, keyword: &str) -> bool {
        matches!(self.peek(), Some(Token { kind: TokenKind::Word(word), .. }) if word.eq_ignore_ascii_case(keyword))
    }

    fn expect(&mut self, kind: &TokenKind, expected: &str) -> Result<(), SyntaxError> {
        match self.peek() {
            Some(token) if &token.kind == kind => {
                self.next += 1;
                Ok(())
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn enter(&mut self, position: usize) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_FILTER_DEPTH {
            return Err(SyntaxError::new(
                format!("the filter nests deeper than {MAX_FILTER_DEPTH} levels"),
                position,
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// `FILTER = term *("or" term)`; inside a value filter's brackets when `in_value_filter`.
    pub(crate) fn filter(&mut self, in_value_filter: bool) -> Result<Filter, SyntaxError> {
        let first = self.conjunction(in_value_filter)?;
        if !self.is_keyword("or") {
            return Ok(first);
        }
        let mut terms = vec![first];
        while self.is_keyword("or") {
            self.next += 1;
            terms.push(self.conjunction(in_value_filter)?);
        }
        Ok(Filter::Or(terms))
    }

    fn conjunction(&mut self, in_value_filter: bool) -> Result<Filter, SyntaxError> {
        let first = self.unary(in_value_filter)?;
        if !self.is_keyword("and") {
            return Ok(first);
        }
        let mut terms = vec![first];
        while self.is_keyword("and") {
            self.next += 1;
            terms.push(self.unary(in_value_filter)?);
        }
        Ok(Filter::And(terms))
    }

    fn unary(&mut self, in_value_filter: bool) -> Result<Filter, SyntaxError> {
        let position = self.position();
        if self.is_keyword("not") {
            self.next += 1;
            self.enter(position)?;
            let inner = self.unary(in_value_filter)?;
            self.leave();
            return Ok(Filter::Not(Box::new(inner)));
        }
        if matches!(
            self.peek(),
            Some(Token {
                kind: TokenKind::OpenParen,
                ..
            })
        ) {
            self.next += 1;
            self.enter(position)?;
            let inner = self.filter(in_value_filter)?;
            self.expect(&TokenKind::CloseParen, "')'")?;
            self.leave();
            return Ok(inner);
        }
        self.attribute_expression(in_value_filter)
    }

    /// Reads an attribute path word.
    pub(crate) fn attribute_path(&mut self) -> Result<AttrPath, SyntaxError> {
        match self.peek() {
            Some(Token {
                kind: TokenKind::Word(word),
                position,
            }) => {
                let path = AttrPath::from_word(word, *position)?;
                self.next += 1;
                Ok(path)
            }
            _ => Err(self.unexpected("an attribute name")),
        }
    }

    /// `[` value filter `]`, after the attribute it filters.
    pub(crate) fn bracketed_value_filter(&mut self) -> Result<Filter, SyntaxError> {
        let position = self.position();
        self.expect(&TokenKind::OpenBracket, "'['")?;
        self.enter(position)?;
        let inner = self.filter(true)?;
        self.expect(&TokenKind::CloseBracket, "']'")?;
        self.leave();
        Ok(inner)
    }

    fn attribute_expression(&mut self, in_value_filter: bool) -> Result<Filter, SyntaxError> {
        let path = self.attribute_path()?;
        self.after_path(path, in_value_filter)
    }

    /// What follows an attribute path: `pr`, a comparison, or a value filter.
    fn after_path(&mut self, path: AttrPath, in_value_filter: bool) -> Result<Filter, SyntaxError> {
        let Some(token) = self.peek().cloned() else {
            return Err(self.unexpected(&format!("an operator after '{path}'")));
        };
        match &token.kind {
            TokenKind::OpenBracket => {
                if in_value_filter {
                    return Err(SyntaxError::new(
                        "value filters cannot be nested",
                        token.position,
                    ));
                }
                if path.sub_attribute.is_some() {
                    return Err(SyntaxError::new(
                        format!(
                            "a value filter must follow a multi-valued attribute, not the sub-attribute '{path}'"
                        ),
                        token.position,
                    ));
                }
                let inner = self.bracketed_value_filter()?;
                let inner = match self.peek() {
                    Some(Token {
                        kind: TokenKind::Dot,
                        ..
                    }) => self.trailing_comparison(inner)?,
                    _ => inner,
                };
                Ok(Filter::ValuePath {
                    path,
                    filter: Box::new(inner),
                })
            }
            TokenKind::Word(word) if word.eq_ignore_ascii_case("pr") => {
                self.next += 1;
                Ok(Filter::Present(path))
            }
            TokenKind::Word(word) => match Operator::from_keyword(word) {
                Some(operator) => {
                    self.next += 1;
                    let value = self.comparison_value(operator)?;
                    Ok(Filter::Compare {
                        path,
                        operator,
                        value,
                    })
                }
                None => Err(SyntaxError::new(
                    format!(
                        "'{word}' is not an operator; expected one of eq, ne, co, sw, ew, gt, ge, lt, le, pr after '{path}'"
                    ),
                    token.position,
                )),
            },
            _ => Err(self.unexpected(&format!("an operator after '{path}'"))),
        }
    }

    /// `attr[filter].sub op value`, which RFC 7644 filters do not have but Entra ID sends when
    /// it matches users on `emails[type eq "work"].value`: the same as
    /// `attr[filter and sub op value]`, which is what it returns.
    fn trailing_comparison(&mut self, inner: Filter) -> Result<Filter, SyntaxError> {
        self.next += 1;
        let sub = self.attribute_path()?;
        if sub.urn.is_some() || sub.sub_attribute.is_some() {
            return Err(SyntaxError::new(
                format!("'{sub}' is not a sub-attribute name"),
                self.position(),
            ));
        }
        let comparison = self.after_path(sub, true)?;
        let mut terms = match inner {
            Filter::And(terms) => terms,
            other => vec![other],
        };
        terms.push(comparison);
        Ok(Filter::And(terms))
    }

    fn comparison_value(&mut self, operator: Operator) -> Result<FilterValue, SyntaxError> {
        let expected = format!(
            "a value after '{}' (a string in double quotes, a number, true, false or null)",
            operator.keyword()
        );
        let value = match self.peek().map(|token| &token.kind) {
            Some(TokenKind::String(text)) => FilterValue::String(text.clone()),
            Some(TokenKind::Number(number)) => FilterValue::Number(number.clone()),
            Some(TokenKind::Word(word)) if word.eq_ignore_ascii_case("true") => {
                FilterValue::Boolean(true)
            }
            Some(TokenKind::Word(word)) if word.eq_ignore_ascii_case("false") => {
                FilterValue::Boolean(false)
            }
            Some(TokenKind::Word(word)) if word.eq_ignore_ascii_case("null") => FilterValue::Null,
            _ => return Err(self.unexpected(&expected)),
        };
        self.next += 1;
        Ok(value)
    }
}

fn describe(kind: &TokenKind) -> String {
    match kind {
        TokenKind::OpenParen => "'('".into(),
        TokenKind::CloseParen => "')'".into(),
        TokenKind::OpenBracket => "'['".into(),
        TokenKind::CloseBracket => "']'".into(),
        TokenKind::Dot => "'.'".into(),
        TokenKind::Word(word) => format!("'{word}'"),
        TokenKind::String(text) => {
            format!("the string {}", serde_json::Value::String(text.clone()))
        }
        TokenKind::Number(number) => format!("the number {number}"),
    }
}
