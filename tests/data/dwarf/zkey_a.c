/* An object whose only local symbol is a zero-size static (as lockdep's
 * __key), at the end of its .bss: it shares its address with the next
 * object's first variable (tests/test_debuginfo.py). */
struct lock_class_key { };
static struct lock_class_key __key;

void *zkey_a(void)
{
	return &__key;
}
