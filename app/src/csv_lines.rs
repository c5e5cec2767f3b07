//! What every CSV upload (the dashboard's assign upload and users import) reads the same way:
//! the file and its header row ([`open`]), and where a record starts, as an editor counts lines,
//! which problems are reported by ([`record_line`]).

/// Opens an uploaded CSV file (records of any length, cells trimmed) and reads its header row;
/// the error is the message the uploader is shown.
pub fn open(file: &[u8]) -> Result<(csv::Reader<&[u8]>, csv::StringRecord), String> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(file);
    let headers = reader
        .headers()
        .map_err(|error| format!("The file is not CSV: {error}"))?
        .clone();
    Ok((reader, headers))
}

/// The line a CSV record starts on in `file`, as an editor counts them. The reader's position
/// counts the newlines it consumed before the record, but sits before the blank lines it skipped
/// to reach it: only those are counted here, so reading a whole file costs linear time.
pub fn record_line(file: &[u8], position: Option<&csv::Position>) -> usize {
    let Some(position) = position else {
        return 1;
    };
    let start = usize::try_from(position.byte())
        .unwrap_or(usize::MAX)
        .min(file.len());
    let skipped = file[start..]
        .iter()
        .take_while(|byte| matches!(byte, b'\n' | b'\r'))
        .filter(|byte| **byte == b'\n')
        .count();
    usize::try_from(position.line())
        .unwrap_or(usize::MAX)
        .saturating_add(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line of the byte at `offset` after skipping blank lines, counted from the start.
    fn counted_from_start(file: &[u8], position: Option<&csv::Position>) -> usize {
        let mut offset = position
            .and_then(|position| usize::try_from(position.byte()).ok())
            .unwrap_or(0)
            .min(file.len());
        while offset < file.len() && matches!(file[offset], b'\n' | b'\r') {
            offset += 1;
        }
        file[..offset].iter().filter(|byte| **byte == b'\n').count() + 1
    }

    #[test]
    fn record_lines_are_those_an_editor_shows() {
        let files: [&[u8]; 6] = [
            b"email\na@x.io\n\n\nb@x.io\n,\nc@x.io",
            b"email\r\na@x.io\r\n\r\n\r\nb@x.io\r\n",
            b"email,notes\na@x.io,\"two\nlines\"\n\nb@x.io,\"\"\"q\"\"\"\n",
            b"\n\nemail\n\na@x.io\n",
            b"email\ra@x.io\r\rb@x.io\r",
            b"email,name\n\"unterminated\n,\n\n",
        ];
        for file in files {
            let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(file);
            let mut lines = Vec::new();
            for record in reader.records() {
                let position = match &record {
                    Ok(record) => record.position().cloned(),
                    Err(error) => error.position().cloned(),
                };
                lines.push((
                    record_line(file, position.as_ref()),
                    counted_from_start(file, position.as_ref()),
                ));
            }
            assert!(!lines.is_empty());
            for (line, expected) in lines {
                assert_eq!(line, expected, "{}", String::from_utf8_lossy(file));
            }
        }
        let mut reader = csv::Reader::from_reader(&b"email\na@x.io\n\n\nb@x.io\n"[..]);
        let lines: Vec<usize> = reader
            .records()
            .map(|record| record_line(b"email\na@x.io\n\n\nb@x.io\n", record.unwrap().position()))
            .collect();
        assert_eq!(lines, [2, 5]);
    }
}
