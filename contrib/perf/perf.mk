# SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
#
# contrib/perf: kmodsyms-dlfilter.so, a perf script --dlfilter (contrib/perf/README.md).
# Included by libkmodsyms/Makefile, whose variables it uses; built by its 'all'
# when perf's <perf/perf_dlfilter.h> is installed (Debian: linux-perf), and
# installed by its 'install' into PERF_DLFILTERDIR, where perf finds a
# dlfilter by its bare name: the dlfilters/ directory of this machine's
# perf (perf --exec-path: Debian /usr/lib/perf-core), else of upstream's
# default exec path, $(PREFIX)/libexec/perf-core.
PERF_SRC := $(ROOT)/contrib/perf
PERF_INCLUDE ?= /usr/include
PERF_EXEC_PATH := $(shell perf --exec-path 2>/dev/null)
PERF_DLFILTERDIR ?= $(or $(PERF_EXEC_PATH),$(PREFIX)/libexec/perf-core)/dlfilters
DLFILTER := $(O)/kmodsyms-dlfilter.so

ifneq ($(wildcard $(PERF_INCLUDE)/perf/perf_dlfilter.h),)
all: $(DLFILTER) $(O)/test_dlfilter
install: install-dlfilter
check: check-dlfilter
endif

$(O)/pic/kmodsyms-dlfilter.o: $(PERF_SRC)/kmodsyms-dlfilter.c $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -I$(SRC) -isystem $(PERF_INCLUDE) $(CPPFLAGS) -fPIC -c -o $@ $<

# The library's own objects, linked in: the filter needs no libkmodsyms.so
# beside it at run time, and exports only perf's entry points.
$(DLFILTER): $(O)/pic/kmodsyms-dlfilter.o $(LIB_PIC) $(PERF_SRC)/dlfilter.map
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,--version-script,$(PERF_SRC)/dlfilter.map \
		-o $@ $(filter %.o,$^)

# Drives the filter as perf does (dlopen, perf_dlfilter_fns, start,
# filter_event on real sample structs, stop): tests/test_dlfilter.py.
$(O)/test_dlfilter: $(PERF_SRC)/test_dlfilter.c
	$(CC) $(ALL_CFLAGS) -isystem $(PERF_INCLUDE) $(CPPFLAGS) $(LDFLAGS) -o $@ $< -ldl

# 'make check': the filter and its driver under the sanitizers, every
# kallsyms address of the fixture through filter_event().
$(ASAN)/kmodsyms-dlfilter.so: $(PERF_SRC)/kmodsyms-dlfilter.c $(LIB_SRC) $(LIB_HDR) \
		$(PERF_SRC)/dlfilter.map
	mkdir -p $(@D) && $(CC) $(ALL_CFLAGS) -O1 -g $(SANITIZE) -fPIC -shared -I$(SRC) \
		-isystem $(PERF_INCLUDE) $(CPPFLAGS) $(LDFLAGS) \
		-Wl,--version-script,$(PERF_SRC)/dlfilter.map -o $@ $< $(LIB_SRC)
$(ASAN)/test_dlfilter: $(PERF_SRC)/test_dlfilter.c
	mkdir -p $(@D) && $(CC) $(ALL_CFLAGS) -O1 -g $(SANITIZE) -isystem $(PERF_INCLUDE) \
		$(CPPFLAGS) $(LDFLAGS) -o $@ $< -ldl

check-dlfilter: $(ASAN)/kmodsyms-dlfilter.so $(ASAN)/test_dlfilter $(SYMS)
	sed 's/ .*/ 1/' $(KALLSYMS) | $(ASAN)/test_dlfilter $(ASAN)/kmodsyms-dlfilter.so run \
		syms=$(SYMS) kallsyms=$(KALLSYMS) ext4,fuse,vmlinux > /dev/null

install-dlfilter: $(DLFILTER)
	install -d $(DESTDIR)$(PERF_DLFILTERDIR)
	install -m 0755 $(DLFILTER) $(DESTDIR)$(PERF_DLFILTERDIR)/

clean: clean-dlfilter
clean-dlfilter:
	rm -f $(DLFILTER) $(O)/pic/kmodsyms-dlfilter.o $(O)/test_dlfilter

.PHONY: install-dlfilter check-dlfilter clean-dlfilter
