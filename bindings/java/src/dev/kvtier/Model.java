// A loaded checkpoint. Immutable and shareable by any number of contexts and threads;
// contexts keep their own reference, so it may be closed once they are created.
package dev.kvtier;

import dev.kvtier.swig.SWIGTYPE_p_kvt_model;
import dev.kvtier.swig.SWIGTYPE_p_p_kvt_model;
import dev.kvtier.swig.kvtier;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A loaded checkpoint: immutable, safe to share between threads and contexts. Contexts keep
 * their own reference, so a model may be closed once its contexts are created.
 */
public final class Model implements AutoCloseable {
  private SWIGTYPE_p_kvt_model handle;

  private Model(SWIGTYPE_p_kvt_model handle) { this.handle = handle; }

  /**
   * Loads an HF checkpoint directory (config.json, *.safetensors, tokenizer.json when present) or a
   * GGUF file (docs/GGUF.md).
   *
   * @param directory the checkpoint directory or GGUF file
   * @return the model; close it when done
   * @throws KvtierException NOT_FOUND, CORRUPT, UNSUPPORTED (architecture or dtype), ...
   */
  public static Model load(String directory) {
    if (directory == null) throw new KvtierException(1, "directory is null");
    SWIGTYPE_p_p_kvt_model box = kvtier.new_kvt_model_box();
    try {
      byte[] err = new byte[1024];
      Kvtier.check(kvtier.kvt_model_load(directory, box, err, err.length), Kvtier.cString(err));
      return new Model(kvtier.kvt_model_box_value(box));
    } finally {
      kvtier.delete_kvt_model_box(box);
    }
  }

  /**
   * Loads an HF checkpoint directory or GGUF file, reporting its progress to a listener that may cancel
   * the load.
   *
   * @param directory the checkpoint directory or GGUF file
   * @param listener hears the stages "files", "tensors" and "tokenizer"
   * @return the model; close it when done
   * @throws KvtierException as {@link #load(String)}, and CANCELLED
   */
  public static Model load(String directory, ProgressListener listener) {
    if (listener == null) return load(directory);
    if (directory == null) throw new KvtierException(1, "directory is null");
    SWIGTYPE_p_p_kvt_model box = kvtier.new_kvt_model_box();
    try {
      byte[] err = new byte[1024];
      Kvtier.check(kvtier.kvt_java_model_load_with_progress(directory, listener, box, err, err.length),
          Kvtier.cString(err));
      return new Model(kvtier.kvt_model_box_value(box));
    } finally {
      kvtier.delete_kvt_model_box(box);
    }
  }

  /**
   * The vocabulary size.
   *
   * @return token ids are 0 .. vocabSize() - 1
   */
  public int vocabSize() { return kvtier.kvt_model_vocab_size(handle()); }

  /**
   * A JSON summary of the checkpoint.
   *
   * @return architecture, shapes, weight bytes, KV bytes per token, and
   *     {@code generation_defaults}: the request defaults in force (generation_config.json)
   */
  public String infoJson() {
    int[] len = new int[1];
    Kvtier.check(kvtier.kvt_model_info_json(handle(), new byte[1], 1, len), "info_json");
    byte[] buf = new byte[len[0] + 1];
    Kvtier.check(kvtier.kvt_model_info_json(handle(), buf, buf.length, len), "info_json");
    return Kvtier.cString(buf);
  }

  /**
   * Whether the checkpoint had a tokenizer.json (text in and out works).
   *
   * @return true when it had one
   */
  public boolean hasTokenizer() { return kvtier.kvt_model_has_tokenizer(handle()) != 0; }

  /**
   * Encodes text into token ids.
   *
   * @param text the text
   * @param addSpecialTokens add what the tokenizer's template adds (e.g. BOS)
   * @return the token ids
   * @throws KvtierException UNSUPPORTED without a tokenizer
   */
  public int[] tokenize(String text, boolean addSpecialTokens) {
    byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
    int[] len = new int[1];
    byte[] err = new byte[1024];
    int special = addSpecialTokens ? 1 : 0;
    Kvtier.check(kvtier.kvt_model_tokenize(handle(), utf8, special, new int[0], 0, len, err,
        err.length), Kvtier.cString(err));
    int[] ids = new int[len[0]];
    Kvtier.check(kvtier.kvt_model_tokenize(handle(), utf8, special, ids, ids.length, len, err,
        err.length), Kvtier.cString(err));
    return ids;
  }

  /**
   * Decodes token ids into text.
   *
   * @param ids the token ids
   * @param skipSpecialTokens leave special tokens (BOS, EOS, ...) out of the text
   * @return the text
   * @throws KvtierException INVALID_ARGUMENT for an id outside the vocabulary
   */
  public String detokenize(int[] ids, boolean skipSpecialTokens) {
    int[] len = new int[1];
    byte[] err = new byte[1024];
    int skip = skipSpecialTokens ? 1 : 0;
    Kvtier.check(kvtier.kvt_model_detokenize(handle(), ids, ids.length, skip, new byte[1], 1, len,
        err, err.length), Kvtier.cString(err));
    byte[] buf = new byte[len[0] + 1];
    Kvtier.check(kvtier.kvt_model_detokenize(handle(), ids, ids.length, skip, buf, buf.length, len,
        err, err.length), Kvtier.cString(err));
    return new String(buf, 0, len[0], StandardCharsets.UTF_8);
  }

  /**
   * The bytes a token adds to decoded text: a piece of UTF-8, or for a byte token part of a
   * character the next tokens complete; a special token gives its text.
   *
   * @param id the token id
   * @return its bytes
   * @throws KvtierException INVALID_ARGUMENT for an id outside the vocabulary, UNSUPPORTED
   *     when the model has no tokenizer
   */
  public byte[] tokenBytes(int id) {
    int[] len = new int[1];
    Kvtier.check(kvtier.kvt_model_token_bytes(handle(), id, new byte[0], 0, len), "token " + id);
    byte[] buf = new byte[len[0] + 1];
    Kvtier.check(kvtier.kvt_model_token_bytes(handle(), id, buf, buf.length, len), "token " + id);
    return Arrays.copyOf(buf, len[0]);
  }

  synchronized SWIGTYPE_p_kvt_model handle() {
    if (handle == null) throw new IllegalStateException("model is closed");
    return handle;
  }

  /** Drops this reference to the model; contexts keep theirs. Calling it again does nothing. */
  @Override
  public synchronized void close() {
    if (handle != null) {
      kvtier.kvt_model_free(handle);
      handle = null;
    }
  }
}
