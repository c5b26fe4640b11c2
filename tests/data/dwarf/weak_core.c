/* kernel/bpf/core.c's way: weak, tentative definitions of protos that
 * another object (weak_helpers.c) defines for real. */
struct proto { long words[4]; };
const struct proto core_own_proto = { { 7 } };
const struct proto proto_a __attribute__((weak));
const struct proto proto_b __attribute__((weak));
