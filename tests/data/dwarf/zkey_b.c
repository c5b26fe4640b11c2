/* The next object: a sized variable where zkey_a.c's .bss ends. */
int zkey_b_counter;

int zkey_b(void)
{
	return ++zkey_b_counter;
}
