/* Segfault (expected: signaled, signal 11). */
int main(void) {
  volatile int *p = (volatile int *)16;
  *p = 1;
  return 0;
}
