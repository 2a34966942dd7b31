/* CPU spin (expected: timeout, limit cpu). */
int main(void) {
  for (volatile unsigned long i = 0;; i++)
    ;
}
