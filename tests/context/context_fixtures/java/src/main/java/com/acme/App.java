package com.acme;

import com.acme.util.Strings;
import static com.acme.util.Strings.padLeft;
import java.util.List;

public class App {
  void run() { Strings.padLeft("a", 3); }
}
