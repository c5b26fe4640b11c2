/* An object whose only local symbol is a zero-size static of a function
 * (as lockdep's __key in mutex_init()), at the end of its .bss: it shares
 * its address with the next object's first variable (tests/test_debuginfo.py). */
struct lock_class_key { };

void *zkey_a(void)
{
	static struct lock_class_key __key;

	return &__key;
}
