/* The spawned program: dynamically linked, does nothing. */
int main(void) { return 0; }
