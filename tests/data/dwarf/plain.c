/* A unit with one code range (DW_AT_low_pc, DW_AT_high_pc) and a
 * zero-initialized variable in .bss: tests/test_dwarf.py. */
long plain_bss[8];

long plain(long x)
{
	return plain_bss[x & 7] += x;
}
