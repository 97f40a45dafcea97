#define LOCAL_MAX 4
