//! Property tests feeding arbitrary bytes to the frame decoder, the request parser and
//! the blocking reader: they must never panic and never buffer past the frame limit.

use std::io::Cursor;

use porter_protocol::{
    Frame, Request,
    frame::{HEADER_LEN, MAX_FRAME_PAYLOAD, decode_prefix},
    sync_io::read_raw_frame,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn decoder_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut offset = 0;
        // Walk the buffer like a stream decoder does; every step consumes or stops.
        while let Ok(Some((_frame, used))) = decode_prefix(&bytes[offset..]) {
            prop_assert!(used >= HEADER_LEN);
            offset += used;
        }
    }

    #[test]
    fn request_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Request::parse(&bytes);
    }

    #[test]
    fn request_parser_never_panics_on_near_json(
        command in ".{0,16}",
        env in proptest::collection::btree_map(".{0,8}", ".{0,12}", 0..8),
        cwd in ".{0,24}",
        extra in "[{}\\[\\]\",:a-z0-9]{0,40}",
    ) {
        let text = format!(r#"{{"kind":"exec","command":{command:?},"env":{},"cwd":{cwd:?}{extra}"#, serde_json::to_string(&env).unwrap());
        if let Ok(Request::Exec(request)) = Request::parse(text.as_bytes()) {
            prop_assert!(!request.command.contains('\0'));
            prop_assert!(request.env.iter().all(|(name, value)| !name.contains(['\0', '=']) && !value.contains('\0')));
        }
    }

    #[test]
    fn blocking_reader_never_sizes_a_buffer_past_the_limit(
        kind in any::<u8>(),
        length in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(&body);
        let mut payload = Vec::new();
        let _ = read_raw_frame(&mut Cursor::new(bytes), &mut payload);
        prop_assert!(payload.capacity() <= MAX_FRAME_PAYLOAD);
    }

    #[test]
    fn valid_frames_survive_arbitrary_splitting(data in proptest::collection::vec(any::<u8>(), 0..3000), cut in 0_usize..3010) {
        let bytes = Frame::Stdout(data.clone()).to_bytes().unwrap();
        let cut = cut.min(bytes.len());
        if cut < bytes.len() {
            prop_assert!(decode_prefix(&bytes[..cut]).unwrap().is_none());
        }
        let (frame, used) = decode_prefix(&bytes).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(frame, Frame::Stdout(data));
    }
}
