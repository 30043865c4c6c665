/* fault_ctl.h: how the libtally programs run under faultfs (tests/fault)
 * set its mode: one line in its control file, read again by the shim
 * within milliseconds. */
#ifndef TALLY_FAULT_CTL_H
#define TALLY_FAULT_CTL_H

#include <stdio.h>

/* 0, or -1 when the control file cannot be written. */
static inline int set_fault(const char *ctl, const char *mode)
{
	FILE *f = fopen(ctl, "w");

	if (f == NULL)
		return -1;
	fprintf(f, "%s\n", mode);
	return fclose(f);
}

#endif
