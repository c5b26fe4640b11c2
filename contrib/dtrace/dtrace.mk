# SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
#
# contrib/dtrace: kms-dt-module, DTrace's kernel module table built from
# libkmodsyms (docs/dtrace-utils.md).  Included by libkmodsyms/Makefile, whose
# variables (O, SRC, LIB_A, HDR, ALL_CFLAGS, PREFIX) it uses; built by its
# 'all' (for the tests); its 'install' puts the example's source among the
# docs (EXAMPLEDIR), not a program in BINDIR.
DTRACE_SRC := $(ROOT)/contrib/dtrace
DTRACE_PROG := $(O)/kms-dt-module
EXAMPLEDIR ?= $(PREFIX)/share/doc/kmodsyms/examples

all: $(DTRACE_PROG)

$(DTRACE_PROG): $(DTRACE_SRC)/kms-dt-module.c $(LIB_A) $(HDR)
	$(CC) $(ALL_CFLAGS) -I$(SRC) $(CPPFLAGS) $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS)

install: install-dtrace
install-dtrace:
	install -d $(DESTDIR)$(EXAMPLEDIR)
	install -m 0644 $(DTRACE_SRC)/kms-dt-module.c $(DESTDIR)$(EXAMPLEDIR)/

# 'make check': the table built, every kallsyms address looked up, from
# libkmodsyms and from plain kallsyms, under the sanitizers.
DTRACE_ASAN := $(ASAN)/kms-dt-module
DTRACE_MODULES ?= $(ROOT)/fixtures/kbuild
$(DTRACE_ASAN): CPPFLAGS += -I$(SRC)
$(DTRACE_ASAN): $(DTRACE_SRC)/kms-dt-module.c $(LIB_SRC) $(LIB_HDR)
	$(SANITIZED_LINK)

check: check-dtrace
check-dtrace: $(DTRACE_ASAN) $(SYMS)
	$(DTRACE_ASAN) --syms $(SYMS) --kallsyms $(KALLSYMS) --modules-dir $(DTRACE_MODULES) \
		modules > /dev/null
	cut -d' ' -f1 $(KALLSYMS) | $(DTRACE_ASAN) --syms $(SYMS) --kallsyms $(KALLSYMS) \
		--modules-dir $(DTRACE_MODULES) lookup > /dev/null
	cut -d' ' -f1 $(KALLSYMS) | $(DTRACE_ASAN) --plain-kallsyms $(KALLSYMS) lookup > /dev/null

clean: clean-dtrace
clean-dtrace:
	rm -f $(DTRACE_PROG)

.PHONY: install-dtrace check-dtrace clean-dtrace
