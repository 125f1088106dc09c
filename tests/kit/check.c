#include "check.h"

int tmo_test_failures;
