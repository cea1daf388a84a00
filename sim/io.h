// Output files: complete or absent, and nothing the user owns damaged on the way.
//
// Every command writes its outputs through an OutputSet:
//
//   OutputSet outputs;
//   outputs.input("--pipeline", pipeline_path);           // an output may not be an input
//   const std::size_t out = outputs.add("--output", path);  // checked now, before the work
//   ... the work ...
//   outputs.write(out, text);                              // staged
//   outputs.commit();                                      // all at once, at the end
//
// What a path names decides how it is written:
//   "-"                  stdout (written at commit, or at flush for a stream)
//   a regular file       a temporary file beside it (FILE.tmp.PID), renamed over it at
//                        commit; the file's mode, and owner where permitted, are kept
//   nothing yet          the same; the new file gets 0666 less the umask
//   a symlink            its target, the same way (the link stays a link)
//   a device, FIFO, ...  written directly, at commit
//   a directory          InputError "PATH: is a directory"
// An uncommitted set (an error, an exception) removes its temporaries; so does SIGINT,
// SIGTERM, SIGHUP or SIGPIPE, before the signal ends the process as it would have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace adagrouper {

// A file's identity: its device and inode.
struct FileId {
  std::uint64_t device = 0, inode = 0;
  bool operator==(const FileId&) const = default;
};

// The identity of the file at `path` (symlinks followed); nullopt when there is none.
std::optional<FileId> file_id(const std::filesystem::path& path);

// What an output path names.
struct OutputTarget {
  enum class Kind { standard_output, regular, absent, special };
  Kind kind = Kind::absent;
  std::string name;            // as given
  std::filesystem::path path;  // what is written: symlinks in the last component followed
  std::optional<FileId> id;    // of an existing file
};

// Resolves an output path ("-": stdout). `option` ("--output"; may be empty) prefixes
// the messages. Throws InputError "PATH: is a directory".
OutputTarget resolve_output(std::string_view option, const std::string& path);

class OutputSet {
 public:
  OutputSet();
  ~OutputSet();  // removes the temporaries of a set that was not committed
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // Records an input file: no output may be it (same device and inode, symlinks
  // followed). A path that does not exist is ignored: its loader says so.
  void input(std::string_view option, const std::string& path);

  // Adds an output, checks it and, for a (new) regular file, creates its temporary, so
  // that an unwritable place fails before the work. Returns its handle. Throws
  // InputError naming `option` for a directory, an input, a file another output writes,
  // or a second stdout; std::runtime_error when the temporary cannot be created.
  std::size_t add(std::string_view option, const std::string& path);

  // Whether some output is stdout (then nothing else may print there).
  bool has_stdout() const;
  // The option that took stdout ("" when none).
  std::string stdout_option() const;

  // Appends to an output (a temporary file, a device, or stdout's buffer).
  void write(std::size_t output, std::string_view bytes);
  // Writes what is buffered for stdout now: for an output that streams.
  void flush(std::size_t output);

  // Renames every temporary over its file, writes what goes to devices and stdout.
  // Throws std::runtime_error naming the file that failed.
  void commit();

 private:
  struct Entry;
  void check_identity(std::string_view option, const OutputTarget& t) const;
  void write_fd(Entry& e, std::string_view bytes);
  void open_special(Entry& e);
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, FileId>> inputs_;
};

// One output written on its own: an OutputSet of one file.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

}  // namespace adagrouper
