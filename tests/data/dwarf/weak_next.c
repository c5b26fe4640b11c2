/* kernel/bpf/tnum.c's place: the object linked after weak_helpers.c. */
struct proto { long words[4]; };
const struct proto next_proto = { { 4 } };
