/* kernel/bpf/helpers.c's way: the strong definitions, at the end of its
 * section, where the next object's (weak_next.c) bytes begin. */
struct proto { long words[4]; };
const struct proto helpers_own_proto = { { 1 } };
const struct proto proto_a = { { 2 } };
const struct proto proto_b = { { 3 } };
