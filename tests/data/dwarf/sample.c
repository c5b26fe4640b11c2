/* A unit with code in two sections (DW_AT_ranges), file-scope variables
 * (global, static, a definition after its declaration: DW_AT_specification)
 * and a function-local static (not top level): tests/test_dwarf.py. */
int global_counter = 3;
static int file_static[4] = {1};
extern int declared_only;
int declared_only = 5;

int use(int i)
{
	static int inner;

	file_static[i & 3] += i;
	return global_counter + file_static[i & 1] + inner++ + declared_only;
}

static void __attribute__((section(".init.text"), used)) init_fn(void)
{
	global_counter++;
}

void (*keep)(void) = init_fn;
