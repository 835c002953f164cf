//! Tracepoint record layouts from tracefs (`events/<group>/<event>/format`): the offset of each
//! field the BPF programs read, taken from the running kernel rather than compiled in, since
//! they move between kernels (Documentation/trace/events.rst, "Event formats").

use std::collections::BTreeMap;

/// One field: offset and size in the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// Fields by name of one event's format file.
pub fn parse(text: &str) -> Result<BTreeMap<String, Field>, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        // field:unsigned int vec;	offset:8;	size:4;	signed:0;
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or("");
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.trim().parse::<u32>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.trim().parse::<u32>().ok();
            }
        }
        // The name is the declaration's last word, without an array suffix (`char comm[16]`).
        let name = decl
            .rsplit([' ', '*'])
            .next()
            .map(|n| n.split('[').next().unwrap_or(n))
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("a field line without a name: {line:?}"))?;
        let (Some(offset), Some(size)) = (offset, size) else {
            return Err(format!("field {name}: no offset or size in {line:?}"));
        };
        fields.insert(name.to_string(), Field { offset, size });
    }
    if fields.is_empty() {
        return Err("no field in the format".into());
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_file_gives_offsets_by_name() {
        let text = "name: napi_gro_receive_entry\nID: 1470\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:unsigned int napi_id;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:u16 queue_mapping;\toffset:16;\tsize:2;\tsigned:0;\n\
\tfield:const void * skbaddr;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:char comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\nprint fmt: \"dev=%s\", __get_str(name)\n";
        let f = parse(text).unwrap();
        assert_eq!(f["name"], Field { offset: 8, size: 4 });
        assert_eq!(f["napi_id"].offset, 12);
        assert_eq!(
            f["queue_mapping"],
            Field {
                offset: 16,
                size: 2
            }
        );
        assert_eq!(
            f["skbaddr"],
            Field {
                offset: 24,
                size: 8
            }
        );
        assert_eq!(
            f["comm"],
            Field {
                offset: 40,
                size: 16
            }
        );
        assert!(parse("name: x\nformat:\n").is_err());
        assert!(parse("\tfield:int x;\toffset:;\tsize:4;\n").is_err());
    }
}
