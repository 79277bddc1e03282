package recall

import "syscall"

// mmapFlags map an index with its pages read in at once: a search touches
// nearly every page of it, and one populate is much cheaper than a fault
// per page.
const mmapFlags = syscall.MAP_SHARED | syscall.MAP_POPULATE
